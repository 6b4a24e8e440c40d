#!/usr/bin/env bash
# Install ServeFit's requirements and start the web app; it opens on the bundled sample trace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m streamlit run app/streamlit_app.py --server.port "${PORT:-8501}" "$@"
