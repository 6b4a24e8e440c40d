#!/usr/bin/env bash
# Yardstick adapter (measure.py --client-cmd): runs what users run, `python -m app bench ...
# --json`, cold start and the results store included, with the BENCH_* variables; then
# cli_result.py turns its JSON into the yardstick's baseline line. SERVEFIT_PYTHON overrides the
# interpreter (default: the repo's .venv); SERVEFIT_WORKERS sets --workers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${SERVEFIT_PYTHON:-$root/.venv/bin/python}
out=${BENCH_OUTDIR:-$(mktemp -d)}
if [ "$BENCH_MODE" = poisson ]; then
  load=(--workload poisson --rate "$BENCH_RATE")
else
  load=(--workload concurrency --concurrency "$BENCH_CONCURRENCY")
fi
cd "$root"
PYTHONPATH="$root" "$py" -m app bench --endpoint "$BENCH_URL" "${load[@]}" \
  --duration-s "$BENCH_DURATION" --prompt-tokens "$BENCH_PROMPT_TOKENS" \
  --output-tokens "$BENCH_MAX_TOKENS" --api "${BENCH_ENDPOINT:-completions}" --vocab-size 32000 \
  --workers "${SERVEFIT_WORKERS:-1}" --workspace "$out/workspace" --json > "$out/bench.json"
"$py" "$here/cli_result.py" "$out/bench.json"
