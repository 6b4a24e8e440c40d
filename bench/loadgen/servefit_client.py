"""ServeFit's load generator as a yardstick client (see bench/loadgen_speed.sh).

Reads the yardstick's BENCH_* variables (mode, url, concurrency, rate, duration, max_tokens,
prompt_tokens, endpoint), runs `runners.loadgen` once, and prints one JSON line in the
yardstick's baseline schema: req/s and tokens/s over the run, TTFT/ITL/TPOT in ms (mean, p99),
and for Poisson runs the achieved send rate and the send lag behind the schedule.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runners.loadgen import LoadOptions, run_workload_sync
from runners.workloads import WorkloadSpec, build_schedule


def _stats_ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p99": None}
    arr = np.asarray(values) * 1e3
    return {"mean": float(arr.mean()), "p99": float(np.percentile(arr, 99))}


def main() -> None:
    env = os.environ
    common = {"duration_s": float(env["BENCH_DURATION"]),
              "prompt_tokens": int(env["BENCH_PROMPT_TOKENS"]),
              "output_tokens": int(env["BENCH_MAX_TOKENS"])}
    if env["BENCH_MODE"] == "poisson":
        spec = WorkloadSpec(kind="poisson", rate_rps=float(env["BENCH_RATE"]), **common)
    else:
        spec = WorkloadSpec(kind="concurrency", concurrency=int(env["BENCH_CONCURRENCY"]),
                            **common)
    schedule = build_schedule(spec)
    options = LoadOptions(url=env["BENCH_URL"], api=env.get("BENCH_ENDPOINT", "completions"),
                          vocab_size=32000, workers=int(env.get("SERVEFIT_WORKERS", "1")))
    out = run_workload_sync(schedule, options)
    ok = [r for r in out.results if r.success]
    span = (max(r.end_at_s for r in out.results) - out.started_at_s) if out.results else 0.0
    line = {
        "client": "servefit",
        "completed": len(ok),
        "errors": len(out.results) - len(ok),
        "req_per_s": len(ok) / span if span else 0.0,
        "tokens_per_s": sum(r.output_tokens or 0 for r in ok) / span if span else 0.0,
        "ttft_ms": _stats_ms([r.ttft_s for r in ok]),
        "itl_ms": _stats_ms([g for r in ok for g in r.itl_s]),
        "tpot_ms": _stats_ms([r.tpot_s for r in ok if r.tpot_s is not None]),
    }
    if schedule.open_loop:
        lag = [r.sent_at_s - out.started_at_s - schedule.requests[i].at_s
               for i, r in zip(out.indices, out.results, strict=True)]
        sends = [r.sent_at_s for r in out.results]
        line["achieved_send_rate"] = (len(sends) - 1) / (max(sends) - min(sends))
        line["send_lag_ms"] = _stats_ms(lag)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
