"""Issue 13's figures from one bench/loadgen_speed.sh results file: ServeFit's CLI against the
plain aiohttp loop measured in the same run (server-observed throughput in the steady window),
and the CLI's client-added timing error (client figure minus the stub's own truth).

usage: ratios.py RESULTS_JSONL   (the newest line of each label counts)
"""

from __future__ import annotations

import json
import sys


def _latest(path: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                out[row["label"]] = row
    return out


def _ratio(rows: dict[str, dict], case: str, key: str) -> str:
    ours, plain = rows.get(f"servefit/{case}"), rows.get(f"plain/{case}")
    if not ours or not plain or not plain.get(key) or ours.get(key) is None:
        return "not measured"
    return f"{ours[key]:,.0f} / {plain[key]:,.0f} = {ours[key] / plain[key]:.2f}x"


def main(path: str) -> None:
    rows = _latest(path)
    print("| same run | servefit CLI / plain aiohttp loop | goal |")
    print("|---|---|---|")
    print(f"| burst c=256, output tok/s | {_ratio(rows, 'burst/c256', 'server_tokens_per_s')}"
          " | >= 2x |")
    print(f"| streams c=256, req/s | {_ratio(rows, 'tput/c256', 'server_req_per_s')} | >= 0.95x |")
    timing = rows.get("servefit/timing/c64", {})
    err = [timing.get(k) for k in ("ttft_err_mean_ms", "ttft_err_p99_ms")]
    shown = " / ".join("-" if e is None else f"{e:+.2f}" for e in err)
    print(f"| CLI TTFT error at c=64, mean / p99 ms | {shown} | < 0.5 / < 2 |")


if __name__ == "__main__":
    main(sys.argv[1])
