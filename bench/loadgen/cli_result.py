"""`python -m app bench --json` output -> the yardstick's baseline JSON line (one line on stdout).

Only renames: every figure is the CLI's own (req/s and tokens/s over the run, TTFT/ITL/TPOT mean
and p99 in ms; for Poisson runs the achieved send rate).
usage: cli_result.py BENCH_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> None:
    report = json.loads(Path(path).read_text())

    def ms(key: str) -> dict[str, float | None]:
        figures = report.get(key) or {}
        return {"mean": figures.get("mean"), "p99": figures.get("p99")}

    line = {"client": "servefit-cli", "completed": report["completed"],
            "errors": report["count"] - report["completed"],
            "req_per_s": report["request_throughput_rps"],
            "tokens_per_s": report["output_throughput_tok_s"],
            "ttft_ms": ms("ttft_ms"), "itl_ms": ms("itl_ms"), "tpot_ms": ms("tpot_ms")}
    if report.get("achieved_rate_rps") is not None:
        line["achieved_send_rate"] = report["achieved_rate_rps"]
    print(json.dumps(line))


if __name__ == "__main__":
    main(sys.argv[1])
