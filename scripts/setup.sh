#!/usr/bin/env bash
# Create .venv (if missing) and install the pinned requirements. Usage: setup.sh [dev|spark]
# dev: requirements-dev.txt (includes requirements-spark.txt); spark: the app plus the Spark
# profile backend.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = dev ]; then
  .venv/bin/python -m pip install --quiet -r requirements-dev.txt
elif [ "${1:-}" = spark ]; then
  .venv/bin/python -m pip install --quiet -r requirements.txt -r requirements-spark.txt
else
  .venv/bin/python -m pip install --quiet -r requirements.txt
fi
# Compile the simulator's numba kernels now, into the checkout's __pycache__ (~20 s once):
# otherwise the first predict, recommend or test process of a fresh checkout pays it, and
# the fast suite's two workers and the CLI processes they start each paid it at once.
# One small prediction compiles every kernel entry point (recommend reuses them all).
# Its warnings (an uncalibrated release, ...) are about that prediction: shown on failure only.
if ! out=$(.venv/bin/python -m app predict --engine vllm --gpu H100-SXM --model Llama-3.1-8B \
    --isl 64 --osl 8 --concurrency 2 --num-requests 4 --max-model-len 1024 2>&1); then
  echo "$out" >&2
  exit 1
fi
# Likewise the profiler's prefix-reuse kernels (~10 s once): profile a three-request trace
# with prompt-block hashes in a throwaway folder (the first `profile` of a trace with hashes,
# and the fast suite's first run, paid it otherwise).
warm=$(mktemp -d)
trap 'rm -rf "$warm"' EXIT
printf '{"arrival_s": %s, "input_tokens": 40, "output_tokens": 5, "hash_ids": [1, 2, %s]}\n' \
  0 3 0.5 4 1.0 5 > "$warm/trace.jsonl"
if ! out=$(.venv/bin/python -m app profile "$warm/trace.jsonl" --workspace "$warm/w.duckdb" 2>&1)
then
  echo "$out" >&2
  exit 1
fi
# And the simulator's call of the hash -> id kernel: its arrays are writable, the profile's are
# read-only Arrow buffers, and numba compiles one version of the kernel for each (~0.4 s in
# every test or CLI process that met them first); with 4,096 distinct blocks, enough to grow
# the kernel's table (`rehash`, compiled on first use).
.venv/bin/python -c 'import numpy as np
from profiler.analysis.prefix import dense_ids
dense_ids(np.arange(1, 4097, dtype=np.uint64), np.array([0, 4096], dtype=np.int64))'
# The checkout's bytecode, compiled once as pip compiles an installed package's (Python skips
# writing it where PYTHONDONTWRITEBYTECODE is set, and then every process compiles again); the
# packages are those of pyproject.toml's [tool.mypy] packages.
.venv/bin/python -m compileall -q app core profiler recommender runners engines
# dev: pytest's rewritten test modules too (collection writes them): a fresh checkout's first
# test run otherwise had its three workers each rewrite and compile every test module at once
# (~27 s of CPU, ~13 s of the fast suite's wall time on two cores).
if [ "${1:-}" = dev ] && ! out=$(env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest \
    --collect-only -q -p no:cacheprovider 2>&1); then
  echo "$out" >&2
  exit 1
fi
