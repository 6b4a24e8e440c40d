"""Spread of the yardstick's timing errors over repeated runs (bench/loadgen_speed.sh with
TIMING_REPEAT=N): for each client, the median, min and max of the client-added TTFT and ITL
error over its `timing` runs. Why: on a shared 2-core machine one run's p99 moves with the
noise of the moment, several-fold between runs; the median of N says more than any one run.

usage: timing_spread.py RESULTS.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

FIGURES = (("ttft_err_mean_ms", "TTFT error mean"), ("ttft_err_p99_ms", "TTFT error p99"),
           ("itl_err_mean_ms", "ITL error mean"), ("itl_err_p99_ms", "ITL error p99"))


def _rows(path: str) -> dict[str, list[dict]]:
    by_client: dict[str, list[dict]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            name, _, rest = row.get("label", "").partition("/")
            if rest.startswith("timing/"):
                by_client[name.split("#", 1)[0]].append(row)
    return by_client


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    by_client = _rows(argv[0])
    if not by_client:
        return 0
    print("| client | runs | " + " | ".join(f"{t} ms: median (min–max)" for _, t in FIGURES)
          + " |")
    print("|---|---|" + "---|" * len(FIGURES))
    for client, rows in by_client.items():
        cells = [_cell([r[k] for r in rows if r.get(k) is not None]) for k, _ in FIGURES]
        print(f"| {client} | {len(rows)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
