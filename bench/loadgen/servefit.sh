#!/usr/bin/env bash
# Yardstick adapter (measure.py --client-cmd): runs ServeFit's load generator with the
# BENCH_* variables; prints the baseline-schema JSON line. SERVEFIT_PYTHON overrides the
# interpreter (default: the repo's .venv); SERVEFIT_WORKERS sets --workers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${SERVEFIT_PYTHON:-$root/.venv/bin/python}
exec "$py" "$here/servefit_client.py"
