"""Calibration error of the performance model: median and p90 APE, train vs held-out test.

Loads data/calibration/fit.json (regenerate with `python -m recommender.calibrate`), predicts
every usable CSV row and prints errors per split and engine against the DESIGN §5 budget
(median ≤ 15 % on rows the model was not fitted to), plus the rows skipped and why.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recommender.calibrate import DEFAULT_CSV, parse_csv
from recommender.fitting import errors
from recommender.perf import FIT_FILE, load_params

BUDGET_MEDIAN_PCT = 15.0


def main() -> int:
    """Print the error table; exit 0 whether or not the budget is met (it is reported)."""
    params = load_params(FIT_FILE)
    rows, skipped = parse_csv(DEFAULT_CSV)
    print(f"rows used {len(rows)}, skipped {len(skipped)}")
    for reason, count in collections.Counter(why for _, why in skipped).most_common():
        print(f"  skipped {count:3d}: {reason}")
    print(f"{'split':6} {'engine':8} {'rows':>5} {'median %':>9} {'p90 %':>8}")
    for split in ("train", "test"):
        for engine in ("all", *sorted({r.engine for r in rows})):
            sel = [r for r in rows if r.split == split and engine in ("all", r.engine)]
            if not sel:
                continue
            ape = errors(sel, params)
            print(f"{split:6} {engine:8} {len(sel):5d} {np.median(ape):9.1f} "
                  f"{np.percentile(ape, 90):8.1f}")
    test = errors([r for r in rows if r.split == "test"], params)
    median = float(np.median(test))
    verdict = "MEETS" if median <= BUDGET_MEDIAN_PCT else "MISSES"
    print(f"held-out median APE {median:.1f} % vs budget {BUDGET_MEDIAN_PCT:.0f} %: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
