"""Fit the performance model's per-engine parameters to published measurements.

Parses `data/calibration/published_calibration.csv.gz` (a copy of the shared benchmark set) into
typed rows (names mapped onto the catalog, metrics normalised to seconds / per-second over
all GPUs), splits them by a stated hash rule, fits `PerfParams` with least squares on log
relative error over the train rows, and writes data/calibration/fit.json with provenance.
Run `python -m recommender.calibration.calibrate`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
from pathlib import Path

import numpy as np

from core.atomic import write_atomic
from core.errors import ServeFitError
from recommender.calibration.answers import errors, refusal
from recommender.calibration.cal_row import CalRow
from recommender.calibration.coverage import coverage_of
from recommender.calibration.fitting import PROCEDURE, fit
from recommender.calibration.parameters import FITTED, REFERENCE_ARCH, SCALES
from recommender.calibration.published.parse import DEFAULT_CSV, TEST_RULE, parse_csv
from recommender.calibration.refit import refit_measured, report
from recommender.model.params import FIT_FILE, PerfParams, default_params
from recommender.model.steptime import DEFAULT_KIND, PROVIDERS


def _summary(rows: list[CalRow], params: PerfParams) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for split in ("train", "test"):
        for engine in ("all", *sorted({r.engine for r in rows})):
            sel = [r for r in rows if r.split == split and engine in ("all", r.engine)]
            if sel:
                ape = errors(sel, params)
                out[f"{split}/{engine}"] = {
                    "rows": len(sel),
                    "median_ape_pct": round(float(np.median(ape)), 2),
                    "p90_ape_pct": round(float(np.percentile(ape, 90)), 2),
                }
    return out


def calibrate(csv: str | Path = DEFAULT_CSV, out: str | Path = FIT_FILE) -> dict:
    """Parse, fit on all rows (`fitting.fit`, the one procedure), report the errors on both
    hash splits (through `predict`, in-sample), write `out`; returns the record.

    All rows, not the train split: what the fit generalises to is measured by
    leave-one-source-out (bench/predict_accuracy.py, whose folds use this same procedure),
    so holding rows back here would only make the shipped parameters worse. The split's
    errors are in-sample.
    """
    rows, skipped = parse_csv(csv)
    base = default_params(DEFAULT_KIND)
    refused = {r.index: why for r in rows if (why := refusal(r, base)) is not None}
    skipped = sorted(skipped + [(i, f"refused by the model: {why}") for i, why in refused.items()])
    rows = [r for r in rows if r.index not in refused]
    # Each provider's overheads fitted beside its own kernel times; the measured provider's
    # fit carries the roofline's as its fallback, fitted first on the same rows.
    params = fit(rows, step_time=DEFAULT_KIND)
    by_kind = {DEFAULT_KIND: params}
    if params.fallback is not None:
        by_kind[params.fallback.step_time] = params.fallback
    for kind in PROVIDERS:
        if kind not in by_kind:  # not setdefault: its argument would refit every provider
            by_kind[kind] = fit(rows, step_time=kind)
    record = {
        "schema_version": 1,
        "provenance": {
            "csv": str(Path(csv).name),
            "csv_sha256": hashlib.sha256(Path(csv).read_bytes()).hexdigest(),
            "date": dt.date.today().isoformat(),
            "rows_used": [r.index for r in rows],
            "rows_train": [r.index for r in rows if r.split == "train"],
            "rows_test": [r.index for r in rows if r.split == "test"],
            "rows_skipped": [{"row": i, "reason": why} for i, why in skipped],
            # what `recommend` warns outside of, read without parsing the CSV again
            "coverage": coverage_of(rows).model_dump(),
            "split_rule": TEST_RULE + " (both splits fitted on; their errors are in-sample)",
            "fit_procedure": PROCEDURE,
            "step_time": f"params: the default provider's ({DEFAULT_KIND}); "
                         "params_by_step_time: one fit per provider (recommender.model.steptime)",
            "objective": f"{PROCEDURE}; fitted per engine: {', '.join(FITTED)}; per GPU "
            f"architecture (reference {REFERENCE_ARCH} = 1): {', '.join(SCALES)}",
            "assumptions": [
                "NIM rows counted as trtllm", "A100 of unstated size = A100-80GB",
                "H100 of unstated form factor (GPUStack pages) = H100-SXM",
                "trtllm-bench ModelOpt FP8/FP4 checkpoints run an FP8 KV cache",
                "NIM FP8 profiles run an FP8 KV cache (train rows: throughput x ITL at "
                "c >= 100 is ~86 running sequences, twice a bf16 pool)",
                "ShareGPT rows use the stated mean ISL/OSL as fixed lengths",
            ],
        },
        "params": json.loads(params.model_dump_json(exclude={"fallback", "step_time"})),
        # each provider's own fit; load_params attaches the fallback's as `fallback`
        "params_by_step_time": {
            k: json.loads(p.model_dump_json(exclude={"fallback", "step_time"}))
            for k, p in by_kind.items()},
        "errors": _summary(rows, params),
    }
    write_atomic(out, json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    """CLI: regenerate the fit file, or (--measured) refit it to the user's own runs."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--csv", default=str(DEFAULT_CSV))
    parser.add_argument("--out", help=f"fit file to write (default {FIT_FILE.name} here; "
                        "with --measured: fit_measured.json in the current folder)")
    parser.add_argument("--measured", metavar="RUNS", help="CSV or JSON Lines of measured "
                        "runs (engine, model, gpu, tp, isl, osl, concurrency|num_requests, "
                        "metric, value): refit from --base as the prior")
    parser.add_argument("--base", default=str(FIT_FILE), help="prior fit for --measured")
    args = parser.parse_args(argv)
    try:
        if args.measured:
            out = args.out or "fit_measured.json"
            print(f"wrote {out}: " + report(refit_measured(args.measured, out, args.base)))
            return 0
        args.out = args.out or str(FIT_FILE)
        record = calibrate(args.csv, args.out)
    except ServeFitError as exc:
        print(f"error: {exc}")
        return 2
    print(f"wrote {args.out}: {len(record['provenance']['rows_used'])} rows used, "
          f"{len(record['provenance']['rows_skipped'])} skipped")
    for key, value in record["errors"].items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["calibrate"]
