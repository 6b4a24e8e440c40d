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
