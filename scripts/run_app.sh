#!/usr/bin/env bash
# Install ServeFit's requirements and start the web app; it opens on the bundled sample trace.
# It listens on 127.0.0.1 only: ADDRESS=0.0.0.0 (or another interface) serves the network,
# PORT moves it, SERVEFIT_SETUP=0 skips the install when .venv is ready. The Docker image
# listens on 0.0.0.0 itself (its CMD), since a container's port is reached from outside it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SERVEFIT_SETUP:-1}" = 0 ] || bash scripts/setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m streamlit run app/streamlit_app.py --server.port "${PORT:-8501}" \
    --server.address "${ADDRESS:-127.0.0.1}" "$@"
