"""Profile speed on a 10 M-request trace: ServeFit (DuckDB) against a plain pandas baseline.

Synthesizes a Parquet trace with `python -m app synth` from the bundled sample's profile (or
takes --trace), then times, each as a user runs it in a fresh process with its peak RSS:
`python -m app profile TRACE --json` cold (fresh workspace: start-up, ingest, every figure) and
warm (the table already in the workspace), the cold run again under a DuckDB memory cap, and a
plain pandas script computing the core figures (read, sort, windows, gaps, percentiles,
sessions, rate series; no segments). Prints the pandas / ServeFit ratio of process wall times
and checks that the figures agree to 1e-6.

Usage: .venv/bin/python bench/profile_speed.py [--requests N | --trace FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
CAPPED = "500MB"

PANDAS_BASELINE = r"""
import json, resource, sys, time
import numpy as np, pandas as pd
t0 = time.perf_counter()
df = pd.read_parquet(sys.argv[1], columns=["arrival_s", "input_tokens", "output_tokens",
                                           "session_id"])
df = df.sort_values("arrival_s", kind="stable")
t = df["arrival_s"].to_numpy()
t = t - t[0]
n = len(t)
duration = t[-1]
mean = n / duration
peak1 = np.bincount(np.floor(t).astype(np.int64)).max()
peak60 = np.bincount(np.floor(t / 60).astype(np.int64)).max() / 60
gaps = np.diff(t)
out = {"n_requests": n, "duration_s": duration, "mean_qps": mean, "peak_qps_1s": float(peak1),
       "peak_qps_60s": peak60, "interarrival_cv": gaps.std() / gaps.mean()}
for col in ("input_tokens", "output_tokens"):
    x = df[col]
    q = x.quantile([0.5, 0.9, 0.99])
    out[col] = {"p50": q[0.5], "p90": q[0.9], "p99": q[0.99], "mean": x.mean(),
                "max": float(x.max()), "min": float(x.min())}
s = df["session_id"]
out["multi_turn_share"] = (None if s.notna().sum() == 0
                           else float((s.map(s.value_counts()) >= 2).sum() / n))
rate = df.groupby(np.floor(t / 60)).agg(n=("input_tokens", "size"),
                                         i=("input_tokens", "sum"), o=("output_tokens", "sum"))
out["seconds"] = time.perf_counter() - t0
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str, float]:
    """(wall seconds, stdout, peak RSS MiB) of one command in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"command failed: {' '.join(args)}\n{err.read().decode()}")
        return elapsed, out.read().decode(), usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--trace", help="profile this Parquet trace instead of synthesizing one")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servefit-bench-"))
    py = sys.executable
    try:
        trace = Path(args.trace).resolve() if args.trace else work / "synthetic.parquet"
        if not args.trace:
            secs, _, _ = _run([py, "-m", "app", "synth", str(SAMPLE), "--requests",
                               str(args.requests), "-o", str(trace), "--workspace",
                               str(work / "src.duckdb")], work)
            print(f"synth: {args.requests:,} requests from {SAMPLE.name} in {secs:.1f} s")
        print(f"trace: {trace.name}, {trace.stat().st_size / 2**20:.0f} MiB Parquet; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
        cli = [py, "-m", "app", "profile", str(trace), "--json", "--workspace"]
        secs_cold, out, rss = _run([*cli, str(work / "ws.duckdb")], work)
        ours = json.loads(out)
        print(f"servefit cold (fresh workspace: start-up, ingest, every figure, JSON): "
              f"{secs_cold:.2f} s, peak RSS {rss:.0f} MiB")
        secs_warm, out, rss = _run([*cli, str(work / "ws.duckdb")], work)
        print(f"servefit warm (table already in the workspace: start-up, every figure, JSON): "
              f"{secs_warm:.2f} s, peak RSS {rss:.0f} MiB")
        secs_cap, _, rss = _run([*cli, str(work / "capped.duckdb")], work,
                                {"SERVEFIT_MEMORY_LIMIT": CAPPED})
        print(f"servefit cold with SERVEFIT_MEMORY_LIMIT={CAPPED} (DuckDB spills): "
              f"{secs_cap:.2f} s, peak RSS {rss:.0f} MiB")
        secs_pd, out, rss = _run([py, "-c", PANDAS_BASELINE, str(trace)], work)
        base = json.loads(out)
        print(f"pandas script (read, sort, rates, percentiles, sessions; no segments): "
              f"{secs_pd:.2f} s with start-up ({base['seconds']:.2f} s computing), "
              f"peak RSS {rss:.0f} MiB")
        print(f"ratio pandas / servefit (process wall time, > 1 = servefit faster): "
              f"cold {secs_pd / secs_cold:.2f}x, warm {secs_pd / secs_warm:.2f}x")
        _compare(ours, base)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _compare(ours: dict, base: dict) -> None:
    worst = 0.0
    for key in ("n_requests", "duration_s", "mean_qps", "peak_qps_1s", "peak_qps_60s",
                "interarrival_cv"):
        worst = max(worst, abs(ours[key] - base[key]) / abs(base[key]))
    for col in ("input_tokens", "output_tokens"):
        for stat, value in base[col].items():
            worst = max(worst, abs(ours[col][stat] - value) / max(abs(value), 1e-12))
    print(f"figures agree: max relative difference {worst:.2e}")
    if worst > 1e-6:
        sys.exit("MISMATCH between ServeFit and the pandas baseline")


if __name__ == "__main__":
    main()
