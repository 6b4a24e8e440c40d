#!/usr/bin/env bash
# Install everything the tests need, lint (ruff), type-check (mypy) and run the whole suite:
# fast tests (three processes), then the slow ones (real browser, the real vLLM's argument
# parser, the Docker image built and run). System packages (Chromium for the browser tests,
# docker.io and debootstrap for the image) are installed with apt-get when missing and running
# as root; vLLM's CPU build goes into its own .venv-vllm.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# Java 17 for the Spark profile backend's slow test (pyspark starts a JVM).
if ! command -v java >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
# Docker for the image test (tests/docker): it starts its own dockerd and builds a Debian base
# with debootstrap. As root with apt-get the packages are installed when missing, and the test
# must then run rather than skip.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
  fi
  export SERVEFIT_DOCKER_TEST=required
fi
bash scripts/setup.sh dev
bash scripts/setup_vllm.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy  # the library packages, configured in pyproject.toml
# Bytecode is kept for the tests even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE): the xdist workers and the CLI processes the tests start then read
# the checkout's modules and pytest's rewritten test modules compiled once, not each from
# source (__pycache__ is git-ignored).
unset PYTHONDONTWRITEBYTECODE
# The fast tests in three processes on two cores (each test owns its temp folder, ports and
# workspace): about a sixth of the suite's time is spent waiting on sockets, child processes
# and the app's script thread, which a third worker fills. worksteal: a worker that runs out
# takes queued tests from the others instead of idling while they finish their fixed share.
.venv/bin/python -m pytest -m "not slow" -n 3 --dist worksteal "$@"
# The ingest fuzzer again with 100 examples a property (30 in the fast suite, to keep it quick),
# when the whole suite runs.
if [ "$#" = 0 ]; then
  SERVEFIT_FUZZ_EXAMPLES=100 .venv/bin/python -m pytest -q tests/profiler/ingestion/test_fuzz.py
fi
# Exit code 5 means "no test selected": not a failure for the slow group alone.
status=0
.venv/bin/python -m pytest -m slow "$@" || status=$?
[ "$status" = 0 ] || [ "$status" = 5 ] || exit "$status"
