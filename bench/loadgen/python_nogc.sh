#!/usr/bin/env bash
# An interpreter for the yardstick's stub server with Python's garbage collector off
# (bench/loadgen_speed.sh with STUB_GC=off). Why: the stub stamps a request when it reads it,
# so a collector pause in the stub while requests wait unread is counted as client-added TTFT
# error; with the collector off, what remains is the clients' own. Used for every client alike.
# usage: python_nogc.sh SCRIPT [ARGS...]   (BENCH_PYTHON: the real interpreter)
set -euo pipefail
exec "${NOGC_PYTHON:?set NOGC_PYTHON to the interpreter}" -c \
  'import gc, runpy, sys; gc.disable(); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")' "$@"
