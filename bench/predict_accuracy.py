"""Accuracy of `python -m app predict` on the published rows, scored through the CLI's path.

Every row of data/calibration/published_calibration.csv states a measurement as `predict`
flags (`CalRow.predict_argv`: engine, model, GPU and count, TP / DP / EP, precision, KV
dtype, lengths, concurrency or offline, request count, running cap, memory fraction, engine
release, harness). The bench parses those flags with the CLI's own parser
(`app.cli.build_parser`), turns them into the request with the CLI's own function
(`app.cli.predict_request`) and answers with the function the CLI calls
(`recommender.predict_sim.predict`); only the fitted parameters differ per fold.
tests/app/test_predict_calibrated_path.py checks, row by row, that
`python -m app predict <flags> --json`
gives exactly what this bench scores with the shipped fit.

Headline: leave-one-source-out (LOSO). For every source (publication), the model is fitted
(`recommender.fitting.fit`, the one procedure, as `python -m recommender.calibrate` does)
on the rows of all other sources and that source's rows are predicted. The absolute
percentage error (APE) of each held-out row is reported per source, per cell
(`recommender.bands.cell_of`: engine × GPU family × dense/MoE × regime), per metric (TTFT,
TPOT/ITL, throughput, each on its own line) and overall, with the share of rows inside their
cell's band. Secondary: the shipped fit on every row (in-sample).

`--write-bands` stores each cell's LOSO median APE and row count in
data/calibration/bands.json (`recommender.bands`), which `predict` reports as its band.
`--sources A,B` limits the folds (a quick look; never for --write-bands).

Run: .venv/bin/python bench/predict_accuracy.py [--quiet] [--write-bands]
     [--step-time measured|roofline] [--sources SUBSTR,...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli import build_parser, predict_request
from core.atomic import write_atomic
from core.errors import ServeFitError
from recommender.bands import BANDS_FILE, LOW_BATCH_MAX_CONCURRENCY, cell_of, regime_of
from recommender.calibrate import DEFAULT_CSV, parse_csv
from recommender.catalog import get_gpu, get_model
from recommender.fitting import LATENCY_METRICS, PROCEDURE, CalRow, fit
from recommender.params import PerfParams, load_params
from recommender.predict_sim import PredictRequest, predict
from recommender.steptime import DEFAULT_KIND, PROVIDERS

BUDGET_MEDIAN_PCT = 15.0  # DESIGN §5
METRIC_GROUPS = {"ttft_s": "TTFT", "tpot_s": "TPOT/ITL", "itl_s": "TPOT/ITL",
                 "e2e_s": "E2E", "output_throughput_tok_s": "throughput",
                 "total_throughput_tok_s": "throughput", "request_throughput_rps": "throughput"}


def row_cell(row: CalRow) -> str:
    return cell_of(row.engine, get_gpu(row.gpu), get_model(row.model),
                   regime_of(None, row.concurrency))


def cli_request(row: CalRow, step_time: str) -> PredictRequest:
    """The request `python -m app predict <row's flags> --step-time KIND` makes."""
    argv = ["predict", *row.predict_argv(), "--step-time", step_time]
    request = predict_request(build_parser("predict").parse_args(argv))
    assert isinstance(request, PredictRequest)
    return request


def score(row: CalRow, params: PerfParams) -> float:
    """What `predict` answers for the row's metric (SI units; latencies: the mean)."""
    value = getattr(predict(cli_request(row, params.step_time), params=params), row.metric)
    return float(value.mean if row.metric in LATENCY_METRICS else value)


def _stats(apes: list[float]) -> str:
    a = np.array(apes)
    return f"{len(a):5d} {np.median(a):9.1f} {np.percentile(a, 90):7.1f}"


def _fold(rows: list[CalRow], source: str, step_time: str
          ) -> tuple[float, list[tuple[int, float | str]]]:
    """(fit seconds, [(row index, predicted value or refusal)]) of one held-out source."""
    t0 = time.perf_counter()
    params = fit([r for r in rows if r.source != source], step_time=step_time)
    fit_s = time.perf_counter() - t0
    out: list[tuple[int, float | str]] = []
    for r in rows:
        if r.source == source:
            try:
                out.append((r.index, score(r, params)))
            except ServeFitError as exc:
                out.append((r.index, str(exc)))
    return fit_s, out


def loso(rows: list[CalRow], *, step_time: str, quiet: bool, only: list[str] | None,
         jobs: int) -> tuple[dict[int, float], list[str]]:
    """({row index: APE %} of every held-out row, [refusals]) over the folds, `jobs` folds
    at a time (each in its own process)."""
    ape: dict[int, float] = {}
    refused: list[str] = []
    by_index = {r.index: r for r in rows}
    sources = sorted({r.source for r in rows})
    if only:
        sources = [s for s in sources if any(o in s for o in only)]
    print(f"leave-one-source-out: {len(sources)} folds over {len(rows)} rows; each source "
          "predicted through the CLI's path by a fit on all the others\n")
    print(f"{'source':60} {'rows':>5} {'median %':>9} {'p90 %':>7} {'fit s':>6}")
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {source: pool.submit(_fold, rows, source, step_time) for source in sources}
        for source, future in futures.items():
            fit_s, results = future.result()
            for index, got in results:
                r = by_index[index]
                if isinstance(got, str):
                    refused.append(f"row {index}: {got}")
                    continue
                ape[index] = abs(got / r.value - 1) * 100
                if not quiet:
                    print(f"    row {index:3d} {row_cell(r):34} {r.metric:24} measured "
                          f"{r.value:10.4g} predicted {got:10.4g} APE {ape[index]:7.1f}")
            got_apes = [ape[i] for i, _ in results if i in ape]
            print(f"{source[:60]:60} {_stats(got_apes) if got_apes else '    0':>23} "
                  f"{fit_s:6.1f}", flush=True)
    return ape, refused


def grouped(rows: list[CalRow], ape: dict[int, float], key) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.index in ape:
            out[key(r)].append(ape[r.index])
    return dict(sorted(out.items()))


def _table(title: str, groups: dict[str, list[float]]) -> None:
    print(f"\n{title}\n{'':44} {'rows':>5} {'median %':>9} {'p90 %':>7}")
    for name, a in groups.items():
        print(f"{name[:44]:44} {_stats(a)}")


def band_coverage(rows: list[CalRow], ape: dict[int, float]) -> float:
    """Share of held-out rows whose APE is within their own cell's LOSO median (the band
    `predict` shows today): a median covers about half by construction."""
    cells = {c: float(np.median(a)) for c, a in grouped(rows, ape, row_cell).items()}
    inside = [ape[r.index] <= cells[row_cell(r)] for r in rows if r.index in ape]
    return float(np.mean(inside)) if inside else 0.0


def write_bands(rows: list[CalRow], ape: dict[int, float], step_time: str) -> None:
    """bands.json from LOSO APEs of `step_time`'s fit (`recommender.bands.BandsFile`),
    keeping the other providers' errors already in the file when they were measured on the
    same CSV with the same fit procedure; the top level is the default provider's."""
    overall = list(ape.values())
    errors = {"overall": {"median_ape": round(float(np.median(overall)) / 100, 4),
                          "rows": len(overall)},
              "cells": {c: {"median_ape": round(float(np.median(a)) / 100, 4), "rows": len(a)}
                        for c, a in grouped(rows, ape, row_cell).items()}}
    csv_sha = hashlib.sha256(DEFAULT_CSV.read_bytes()).hexdigest()
    providers = {step_time: errors}
    if BANDS_FILE.exists():
        old = json.loads(BANDS_FILE.read_text(encoding="utf-8"))
        if old.get("csv_sha256") == csv_sha and old.get("fit_procedure") == PROCEDURE:
            providers = {**old.get("providers", {}), step_time: errors}
    top = providers.get(DEFAULT_KIND, errors)
    record = {
        "schema_version": 2,
        "method": "leave-one-source-out: fit (recommender.fitting.fit) on every other source, "
                  "predict this source's rows through the CLI's path (app.cli.predict_request "
                  "of each row's predict flags -> predict_sim.predict); median absolute "
                  "relative error per cell (engine/gpu family/dense|moe/regime)",
        "csv_sha256": csv_sha,
        "fit_procedure": PROCEDURE,
        **top,
        "providers": providers,
    }
    write_atomic(BANDS_FILE, json.dumps(record, indent=2) + "\n")
    print(f"wrote {BANDS_FILE}")


def in_sample(rows: list[CalRow], step_time: str) -> None:
    """The secondary figure: the shipped fit on every row (in-sample: it saw them all)."""
    params = load_params(step_time=step_time)
    apes = []
    for r in rows:
        try:
            apes.append(abs(score(r, params) / r.value - 1) * 100)
        except ServeFitError:
            continue
    print(f"\nsecondary: shipped fit.json on all rows (in-sample) {_stats(apes)}")


def main() -> int:
    """Print LOSO (headline) and in-sample (secondary) APEs; exit 0 whether or not the goal
    is met (it is reported)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="summaries only, no per-row lines")
    ap.add_argument("--write-bands", action="store_true",
                    help=f"store the per-cell LOSO errors in {BANDS_FILE.name}")
    ap.add_argument("--step-time", default=DEFAULT_KIND, choices=list(PROVIDERS))
    ap.add_argument("--sources", help="comma-separated substrings: only these folds")
    ap.add_argument("--no-in-sample", action="store_true", help="skip the secondary line")
    ap.add_argument("--jobs", type=int, default=2, help="folds fitted at once (processes)")
    args = ap.parse_args()
    if args.write_bands and args.sources:
        ap.error("--write-bands needs every fold (no --sources)")
    rows, skipped = parse_csv(DEFAULT_CSV)
    print(f"fit procedure: {PROCEDURE}\n")
    t0 = time.perf_counter()
    ape, refused = loso(rows, step_time=args.step_time, quiet=args.quiet,
                        only=args.sources.split(",") if args.sources else None,
                        jobs=args.jobs)
    _table("per cell (engine/gpu family/dense|moe/regime; low_batch = closed loop at <= "
           f"{LOW_BATCH_MAX_CONCURRENCY})", grouped(rows, ape, row_cell))
    _table("per metric", grouped(rows, ape, lambda r: METRIC_GROUPS[r.metric]))
    print(f"\n{len(rows)} rows parsed ({len(skipped)} CSV rows skipped by the parser: "
          f"`python -m recommender.calibrate` lists why), {len(refused)} refused by predict; "
          f"LOSO took {time.perf_counter() - t0:.0f} s")
    for line in refused:
        print(f"  refused {line}")
    overall = list(ape.values())
    median = float(np.median(overall))
    verdict = "MEETS" if median <= BUDGET_MEDIAN_PCT else "MISSES"
    print(f"rows inside their cell's band (its LOSO median APE): "
          f"{band_coverage(rows, ape):.0%}")
    print(f"HEADLINE leave-one-source-out median APE of predict (CLI path) {median:.1f} % "
          f"over {len(overall)} held-out rows (p90 {np.percentile(overall, 90):.1f} %) vs "
          f"goal {BUDGET_MEDIAN_PCT:.0f} %: {verdict}")
    if not args.no_in_sample:
        in_sample(rows, args.step_time)
    if args.write_bands:
        write_bands(rows, ape, args.step_time)
    return 0


if __name__ == "__main__":
    sys.exit(main())
