#!/usr/bin/env bash
# Yardstick adapter for the baseline client (plain_aiohttp.py). BENCH_PYTHON or the repo's .venv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "${SERVEFIT_PYTHON:-$here/../../.venv/bin/python}" "$here/plain_aiohttp.py"
