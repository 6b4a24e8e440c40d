"""Profile speed on a 10 M-request trace: ServeFit (DuckDB) against a plain pandas baseline.

Synthesizes a Parquet trace with `python -m app synth` from the bundled sample's profile, then
times, each in a fresh process with its peak RSS: `python -m app profile TRACE --json` (end to
end: start-up, ingest into the workspace, every figure) and a straightforward pandas
implementation of the same figures (read, sort, windows, gaps, percentiles, sessions, rate
series; not the k-means segments, which use the same library either way), and checks that the
two agree to 1e-6.

Usage: .venv/bin/python bench/profile_speed.py [--requests N] [--keep]
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

RSS_WRAPPER = r"""
import resource, runpy, sys, time
t0 = time.perf_counter()
sys.argv = ["app", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("app", run_name="__main__")
except SystemExit as e:
    code = e.code
print(f"RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}", file=sys.stderr)
sys.exit(code)
"""


def _run(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"command failed: {' '.join(args)}\n{done.stderr}")
    return elapsed, done


def _rss(stderr: str) -> float:
    return float(next(line.split()[1] for line in stderr.splitlines() if line.startswith("RSS")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000_000)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servefit-bench-"))
    py = sys.executable
    try:
        trace = work / "synthetic.parquet"
        secs, _ = _run([py, "-m", "app", "synth", str(SAMPLE), "--requests", str(args.requests),
                        "-o", str(trace), "--workspace", str(work / "src.duckdb")], work)
        size_mb = trace.stat().st_size / 2**20
        print(f"synth: {args.requests:,} requests from {SAMPLE.name} in {secs:.1f} s "
              f"({size_mb:.0f} MiB Parquet)")
        cli = [py, "-c", RSS_WRAPPER, "profile", str(trace), "--json", "--workspace"]
        secs_sf, done = _run([*cli, str(work / "ws.duckdb")], work)
        ours = json.loads(done.stdout)
        print(f"servefit profile, first run (CLI end to end: start-up, ingest into the DuckDB "
              f"workspace, every figure): {secs_sf:.2f} s, peak RSS {_rss(done.stderr):.0f} MiB")
        secs_again, done = _run([*cli, str(work / "ws.duckdb")], work)
        print(f"servefit profile, again (trace already in the workspace: figures only, CLI end "
              f"to end): {secs_again:.2f} s, peak RSS {_rss(done.stderr):.0f} MiB")
        os.environ["SERVEFIT_MEMORY_LIMIT"] = CAPPED
        secs_cap, done = _run([*cli, str(work / "capped.duckdb")], work)
        del os.environ["SERVEFIT_MEMORY_LIMIT"]
        print(f"servefit profile, first run with SERVEFIT_MEMORY_LIMIT={CAPPED} (DuckDB spills): "
              f"{secs_cap:.2f} s, peak RSS {_rss(done.stderr):.0f} MiB")
        secs_pd, done = _run([py, "-c", PANDAS_BASELINE, str(trace)], work)
        base = json.loads(done.stdout)
        print(f"pandas baseline (same figures, computation only): {base['seconds']:.2f} s "
              f"({secs_pd:.2f} s with start-up), peak RSS {base['peak_rss_mb']:.0f} MiB")
        print(f"ratio pandas / servefit (process wall time, > 1 = servefit faster): first run "
              f"{secs_pd / secs_sf:.2f}x, again {secs_pd / secs_again:.2f}x")
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
