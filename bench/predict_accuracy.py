"""Accuracy of `predict` (the simulator path the CLI answers with) on the published rows.

For every usable row of data/calibration/published_calibration.csv, runs the row's fixed-length
workload through `recommender.predict_sim.simulate_load` with the fitted parameters
(data/calibration/fit.json) and prints the absolute percentage error against the measured
value, next to the steady-state model's (`perf.predict`, what the fit was made with); then
the median APE over train, held-out test and all rows. DESIGN §5 budget: held-out median
<= 15 %.

Run: .venv/bin/python bench/predict_accuracy.py [--quiet]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.errors import ServeFitError
from recommender.calibrate import DEFAULT_CSV, parse_csv
from recommender.catalog import get_gpu, get_model
from recommender.fitting import CalRow, predict_row
from recommender.perf import FIT_FILE, PerfParams, load_params
from recommender.predict_sim import simulate_load

BUDGET_MEDIAN_PCT = 15.0
LATENCIES = {"ttft_s", "tpot_s", "itl_s", "e2e_s"}


def simulated(row: CalRow, params: PerfParams) -> float:
    """The CLI's answer for the row's metric (latencies: the mean, as the rows report)."""
    model = get_model(row.model)
    pred = simulate_load(row.engine_config(model), model, get_gpu(row.gpu), row.load(),
                         gpus=row.gpus, params=params)
    value = getattr(pred, row.metric)
    return float(value.mean if row.metric in LATENCIES else value)


def main() -> int:
    """Print per-row and summary APEs; exit 0 whether or not the budget is met."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="summary only")
    args = ap.parse_args()
    params = load_params(FIT_FILE)
    rows, _ = parse_csv(DEFAULT_CSV)
    sim_ape: dict[int, float] = {}
    steady_ape: dict[int, float] = {}
    t0 = time.perf_counter()
    if not args.quiet:
        print(f"{'row':>4} {'split':5} {'engine':6} {'metric':24} {'measured':>10} "
              f"{'predict':>10} {'APE %':>7} {'steady APE %':>12}")
    for r in rows:
        try:
            got = simulated(r, params)
        except ServeFitError as exc:
            print(f"{r.index:4d} {r.split:5} {r.engine:6} {r.metric:24} not predicted: {exc}")
            continue
        sim_ape[r.index] = abs(got / r.value - 1) * 100
        steady_ape[r.index] = abs(predict_row(r, params) / r.value - 1) * 100
        if not args.quiet:
            print(f"{r.index:4d} {r.split:5} {r.engine:6} {r.metric:24} {r.value:10.4g} "
                  f"{got:10.4g} {sim_ape[r.index]:7.1f} {steady_ape[r.index]:12.1f}")
    dt = time.perf_counter() - t0
    print(f"\n{len(sim_ape)} rows predicted in {dt:.1f} s")
    print(f"{'split':6} {'rows':>5} {'predict median %':>17} {'p90 %':>7} {'steady median %':>16}")
    for split in ("train", "test", "all"):
        sel = [r.index for r in rows if r.index in sim_ape and split in ("all", r.split)]
        a = np.array([sim_ape[i] for i in sel])
        b = np.array([steady_ape[i] for i in sel])
        print(f"{split:6} {len(sel):5d} {np.median(a):17.1f} {np.percentile(a, 90):7.1f} "
              f"{np.median(b):16.1f}")
    test = [sim_ape[r.index] for r in rows if r.split == "test" and r.index in sim_ape]
    median = float(np.median(test))
    verdict = "MEETS" if median <= BUDGET_MEDIAN_PCT else "MISSES"
    print(f"held-out median APE of predict {median:.1f} % vs budget "
          f"{BUDGET_MEDIAN_PCT:.0f} %: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
