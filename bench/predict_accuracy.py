"""Accuracy of `python -m app predict` on the published rows, scored through the CLI's path.

Every row of data/calibration/published_calibration.csv.gz states a measurement as `predict`
flags (`CalRow.predict_argv`: engine, model, GPU and count, TP / DP / EP, precision, KV dtype,
lengths, concurrency or offline, request count, running cap, memory fraction, engine release,
harness). The bench parses those flags with the CLI's own parser (`app.cli.main.build_parser`),
turns them into the request with the CLI's own function (`app.cli.main.predict_request`) and
answers with the function the CLI calls (`recommender.sim.predict.predict`); only the fitted
parameters differ per fold. tests/app/test_predict_calibrated_path.py checks, row by row, that
`python -m app predict <flags> --json` gives exactly what this bench scores with the shipped
fit.

Headline: leave-one-family-out (LOFO). A family is who measured with which harness
(`recommender.calibration.published.sources.family_of`: all of GPUStack's pages are one family,
NVIDIA's TensorRT-LLM docs one, NIM one, AMD's results page one, ...). For every family the
model is fitted (`recommender.calibration.fitting.fit`, the one procedure, as `python -m
recommender.calibration.calibrate` does) on the rows of all other families and that family's
rows are predicted. The absolute percentage error (APE) of each held-out row is reported per
family, per cell (`recommender.calibration.cells.cell_of`: engine × GPU family × dense/MoE ×
regime), per step-time pricing (the measured tables, or the roofline fallback for the cells
they lack), per metric (TTFT, TPOT/ITL, throughput, each on its own line) and overall.
Intervals: per interval group (`recommender.calibration.bands.interval_keys`: cell × metric,
pooled with wider groups below 20 rows or 3 families) the p10-p90 of the signed error
log(measured / predicted) a family never seen should expect
(`recommender.calibration.bands.predictive_interval`: each family's median shift, their spread
with Student's t, plus the scatter within families); coverage is the share of rows inside the
interval built from the other families' errors only. `--group source` runs leave-one-source-out
instead (the secondary line). Secondary too: the shipped fit on every row (in-sample).

`--write-bands` stores each cell's median APE, each interval group's signed errors and the
releases the rows ran in data/calibration/bands.json (`recommender.calibration.bands_file`), which
`predict` reports as its band and intervals. `--only A,B` limits the folds (a quick look; never
for --write-bands); `--rows-out FILE` writes every held-out row's prediction as JSON with the
CSV's hash, fit procedure, provider and grouping they came from, and `--rows-in FILE` reports
on such a file without fitting again (with --write-bands only when all four are today's: a
change to how intervals are built from the same held-out predictions). The file is written
after each fold, so `--resume FILE` goes on from the folds it holds (a killed run loses one
fold at most; the 4,213-row file's nine folds took 4-11 minutes each, two at a time on a
2-core machine: 34 minutes in all).

Run: .venv/bin/python bench/predict_accuracy.py [--quiet] [--write-bands]
     [--group family|source] [--step-time measured|roofline] [--only SUBSTR,...]
     [--jobs 2] [--rows-out FILE | --resume FILE | --rows-in FILE] [--no-in-sample]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import multiprocessing
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.main import build_parser, predict_request
from core.atomic import write_atomic
from core.figures import INTERVAL_METRIC
from recommender.calibration.answers import predict_rows
from recommender.calibration.bands import (
    OUTSIDE_LEVEL,
    interval_for,
    interval_keys,
    predictive_interval,
)
from recommender.calibration.bands_file import BANDS_FILE
from recommender.calibration.cal_row import LATENCY_METRICS, CalRow
from recommender.calibration.cells import LOW_BATCH_MAX_CONCURRENCY, cell_of, regime_of
from recommender.calibration.fitting import PROCEDURE, fit
from recommender.calibration.parameters import FITTED, REFERENCE_ARCH, SCALES
from recommender.calibration.published.parse import DEFAULT_CSV, parse_csv
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.defaults import release_key
from recommender.model.params import PerfParams, load_params
from recommender.model.resolve import resolve
from recommender.model.steptime import DEFAULT_KIND, FALLBACK_KIND, PROVIDERS
from recommender.sim.predict import PredictRequest, predict

ROOT = Path(__file__).resolve().parents[1]
BUDGET_MEDIAN_PCT = 15.0  # DESIGN §5
METRIC_GROUPS = {"ttft_s": "TTFT", "tpot_s": "TPOT/ITL", "itl_s": "TPOT/ITL",
                 "e2e_s": "E2E", "output_throughput_tok_s": "throughput",
                 "total_throughput_tok_s": "throughput", "request_throughput_rps": "throughput"}


def row_cell(row: CalRow) -> str:
    return cell_of(row.engine, get_gpu(row.gpu), get_model(row.model),
                   regime_of(row.load().arrival))


@functools.cache
def _predict_parser() -> argparse.ArgumentParser:
    """`python -m app predict`'s parser, built once: parsing leaves it as it was, and building
    it again for each row cost three quarters of a row's request."""
    return build_parser("predict")


def cli_request(row: CalRow, step_time: str) -> PredictRequest:
    """The request `python -m app predict <row's flags> --step-time KIND` makes."""
    argv = ["predict", *row.predict_argv(), "--step-time", step_time]
    request = predict_request(_predict_parser().parse_args(argv))
    assert isinstance(request, PredictRequest)
    return request


def score(row: CalRow, params: PerfParams) -> float:
    """What `predict` answers for the row's metric (SI units; latencies: the mean)."""
    return _value(predict(cli_request(row, params.step_time), params=params), row.metric)


def _value(pred, metric: str) -> float:
    value = getattr(pred, metric)
    return float(value.mean if metric in LATENCY_METRICS else value)


def score_rows(rows: list[CalRow], params: PerfParams) -> list[tuple[int, float | str]]:
    """[(row index, `score` or the refusal)], one `predict` per distinct CLI request."""
    return predict_rows(rows, params, lambda r: cli_request(r, params.step_time))


def _stats(apes: list[float]) -> str:
    a = np.array(apes)
    return f"{len(a):5d} {np.median(a):9.1f} {np.percentile(a, 90):7.1f}"


# Families with fewer rows than this are held out together, one fold for all of them: a
# fold costs a whole fit, and holding several out at once only makes the test harder.
SMALL_FAMILY_ROWS = 30


def folds(rows: list[CalRow], group: str) -> dict[int, str]:
    """{row index: the fold that holds it out}: its `group` value (family or source), the
    families under SMALL_FAMILY_ROWS rows pooled into one fold."""
    sizes = defaultdict(int)
    for r in rows:
        sizes[getattr(r, group)] += 1
    small = sorted(g for g, n in sizes.items() if n < SMALL_FAMILY_ROWS)
    pooled = f"{len(small)} small families ({', '.join(small)})"
    return {r.index: pooled if group == "family" and getattr(r, group) in small
            else getattr(r, group) for r in rows}


def _fold(rows: list[CalRow], fold: dict[int, str], held: str, step_time: str
          ) -> tuple[float, list[tuple[int, float | str]]]:
    """(fit seconds, [(row index, predicted value or refusal)]) of one held-out fold."""
    t0 = time.perf_counter()
    params = fit([r for r in rows if fold[r.index] != held], step_time=step_time)
    fit_s = time.perf_counter() - t0
    return fit_s, score_rows([r for r in rows if fold[r.index] == held], params)


FoldResults = list[tuple[int, float | str]]  # (row index, predicted value or refusal)


def cross_validate(rows: list[CalRow], *, group: str, step_time: str, quiet: bool,
                   only: list[str] | None, jobs: int, done: dict[str, FoldResults] | None = None,
                   on_fold: Callable[[dict[str, FoldResults]], None] | None = None,
                   ) -> tuple[dict[int, float], list[str]]:
    """({row index: predicted value} of every held-out row, [refusals]) over the folds (one
    per `group` value: family or source), `jobs` folds at a time in their own processes.
    Folds in `done` (a --resume file's) are reported, not refitted; `on_fold` gets every
    finished fold's results after each fold (the checkpoint a run can resume from)."""
    fold = folds(rows, group)
    groups = sorted(set(fold.values()))
    if only:
        groups = [g for g in groups if any(o in g for o in only)]
    finished = {g: v for g, v in (done or {}).items() if g in groups}
    # folds of the checkpoint that --only leaves out stay in it (each write is whole)
    kept = {g: v for g, v in (done or {}).items() if g not in groups}
    print(f"leave-one-{group}-out: {len(groups)} folds over {len(rows)} rows; each {group} "
          "predicted through the CLI's path by a fit on all the others (families under "
          f"{SMALL_FAMILY_ROWS} rows held out together)"
          + (f"; {len(finished)} resumed from a checkpoint" if finished else "") + "\n")
    print(f"{group:60} {'rows':>5} {'median %':>9} {'p90 %':>7} {'fit s':>6}")
    pred: dict[int, float] = {}
    refused: list[str] = []
    context = multiprocessing.get_context("fork")
    for held, results in finished.items():  # resumed: fit seconds not known (nan)
        refused += _tally(rows, held, results, math.nan, pred, quiet=quiet)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_fold, rows, fold, g, step_time): g
                   for g in groups if g not in finished}
        for future in as_completed(futures):  # checkpointed as each fold ends
            held, (fit_s, results) = futures[future], future.result()
            finished[held] = results
            if on_fold is not None:
                on_fold({**kept, **finished})
            refused += _tally(rows, held, results, fit_s, pred, quiet=quiet)
    return pred, refused


def _tally(rows: list[CalRow], held: str, results: FoldResults, fit_s: float,
           pred: dict[int, float], *, quiet: bool) -> list[str]:
    """Print one fold's rows (unless `quiet`) and its line; its predictions go into `pred`;
    returns its refusals."""
    by_index = {r.index: r for r in rows}
    refused = []
    for index, got in results:
        r = by_index[index]
        if isinstance(got, str):
            refused.append(f"row {index}: {got}")
            continue
        pred[index] = got
        if not quiet:
            print(f"    row {index:3d} {row_cell(r):34} {r.metric:24} measured "
                  f"{r.value:10.4g} predicted {got:10.4g} APE {ape_of(r, got):7.1f}")
    got_apes = [ape_of(by_index[i], pred[i]) for i, _ in results if i in pred]
    print(f"{held[:60]:60} {_stats(got_apes) if got_apes else '    0':>23} "
          f"{fit_s:6.1f}", flush=True)
    return refused


def ape_of(row: CalRow, predicted: float) -> float:
    return abs(predicted / row.value - 1) * 100


def signed(row: CalRow, predicted: float) -> float:
    """log(measured / predicted): > 0 when the model is low."""
    return math.log(row.value / predicted)


def interval_groups(rows: list[CalRow], pred: dict[int, float]
                    ) -> dict[str, dict[str, list[float]]]:
    """Every interval group (`interval_keys`) → family → the signed errors of its held-out
    rows (an interval is built for a family never seen: `bands.predictive_interval`)."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.index in pred:
            for key in _keys(r):
                out[key][r.family].append(signed(r, pred[r.index]))
    return out


def _keys(row: CalRow) -> list[str]:
    return interval_keys(row.engine, get_gpu(row.gpu), get_model(row.model),
                         regime_of(row.load().arrival), INTERVAL_METRIC[row.metric])


def _releases(rows: list[CalRow]) -> dict[str, set[str]]:
    """{engine: releases (major.minor) its rows measured}, as bands.json lists them."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if (key := release_key(r.engine_version)) is not None:
            out[r.engine].add(key)
    return out


def _outside(row: CalRow, releases: dict[str, set[str]]) -> bool:
    """Whether `predict` calls the row outside the calibrated range (`bands.intervals_of`):
    an AMD GPU, or a release (the row's, else the plug-in's) the other families never
    measured; its interval then starts OUTSIDE_LEVEL groups wider."""
    from engines.registry import ENGINES

    release = row.engine_version or ENGINES[row.engine].defaults.engine_version
    unknown = bool(releases) and (
        (release_key(release) or release) not in releases.get(row.engine, set()))
    return get_gpu(row.gpu).vendor == "amd" or unknown


class Covered(NamedTuple):
    """A held-out row against its interval."""

    inside: bool
    width: float  # high / low of the interval: coverage means little without it


def coverage(rows: list[CalRow], pred: dict[int, float], group: str
             ) -> dict[int, Covered]:
    """{row: measured inside its interval}, each row's interval built from the held-out errors
    of the other groups (families) only, as `predict` picks it (`bands.interval_for`)."""
    inside: dict[int, Covered] = {}
    fold = folds(rows, group)
    for held in sorted(set(fold.values())):
        others = [r for r in rows if fold[r.index] != held]
        errors = {k: predictive_interval(v) for k, v in interval_groups(others, pred).items()}
        releases = _releases(others)
        for r in rows:
            if fold[r.index] == held and r.index in pred:
                start = OUTSIDE_LEVEL if _outside(r, releases) else 0
                found = interval_for(_keys(r), errors, start=start)
                if found is not None:
                    e = signed(r, pred[r.index])
                    lo, hi = found[1].p10, found[1].p90
                    inside[r.index] = Covered(lo <= e <= hi, math.exp(hi - lo))
    return inside


def grouped(rows: list[CalRow], ape: dict[int, float], key) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.index in ape:
            out[key(r)].append(ape[r.index])
    return dict(sorted(out.items()))


def _share(rows: list[CalRow], inside: dict[int, Covered], key) -> dict[str, str]:
    out: dict[str, list[Covered]] = defaultdict(list)
    for r in rows:
        if r.index in inside:
            out[key(r)].append(inside[r.index])
    return {k: _covered(v) for k, v in sorted(out.items())}


def _covered(v: list[Covered]) -> str:
    if not v:
        return "no rows"
    return (f"{np.mean([c.inside for c in v]):.0%} of {len(v)} (median width high/low "
            f"x{np.median([c.width for c in v]):.2f})")


def _table(title: str, groups: dict[str, list[float]]) -> None:
    print(f"\n{title}\n{'':44} {'rows':>5} {'median %':>9} {'p90 %':>7}")
    for name, a in groups.items():
        print(f"{name[:44]:44} {_stats(a)}")


def write_bands(rows: list[CalRow], pred: dict[int, float], step_time: str, group: str
                ) -> None:
    """bands.json from the held-out predictions of `step_time`'s fit
    (`recommender.calibration.bands_file.BandsFile`), keeping the other providers' errors
    already in the file when they were measured on the same CSV, grouping and fit procedure;
    the top level is the default provider's."""
    ape = {i: ape_of(r, pred[i]) for r in rows if (i := r.index) in pred}
    overall = list(ape.values())
    releases = _releases(rows)
    errors = {"overall": {"median_ape": round(float(np.median(overall)) / 100, 4),
                          "rows": len(overall)},
              "cells": {c: {"median_ape": round(float(np.median(a)) / 100, 4), "rows": len(a)}
                        for c, a in grouped(rows, ape, row_cell).items()},
              "intervals": {k: predictive_interval(v).model_dump()
                            for k, v in sorted(interval_groups(rows, pred).items())},
              "releases": {e: sorted(v) for e, v in sorted(releases.items())}}
    csv_sha = _provenance(rows, step_time, group)["csv_sha256"]
    method = (f"leave-one-{group}-out: fit (recommender.calibration.fitting.fit) on every "
              f"other {group} (families under {SMALL_FAMILY_ROWS} rows held out together), "
              f"predict this {group}'s rows through the CLI's path (app.cli.main.predict_request "
              "of each row's predict flags -> recommender.sim.predict.predict); median absolute "
              "relative error per cell (engine/gpu family/dense|moe/regime); per interval group "
              "(bands.interval_keys) the p10-p90 of the signed error log(measured/predicted) "
              "a family never seen should expect (bands.predictive_interval: the families' "
              "median shifts with Student's t spread plus the scatter within families)")
    providers = {step_time: errors}
    if BANDS_FILE.exists():
        old = json.loads(BANDS_FILE.read_text(encoding="utf-8"))
        if (old.get("csv_sha256") == csv_sha and old.get("fit_procedure") == PROCEDURE
                and old.get("method") == method):
            providers = {**old.get("providers", {}), step_time: errors}
    top = providers.get(DEFAULT_KIND, errors)
    record = {"schema_version": 3, "method": method, "csv_sha256": csv_sha,
              "fit_procedure": PROCEDURE, "overall": top["overall"], "cells": top["cells"],
              "providers": providers}
    write_atomic(BANDS_FILE, json.dumps(record, indent=2) + "\n")
    print(f"wrote {BANDS_FILE}")


def fitted_parameters(rows: list[CalRow], step_time: str) -> int:
    """How many parameters a fit on `rows` estimates: per engine with rows FITTED, per GPU
    architecture with rows but the reference SCALES; twice under a provider with a fallback
    (the roofline's own fit)."""
    engines = {r.engine for r in rows}
    families = {get_gpu(r.gpu).architecture for r in rows} - {REFERENCE_ARCH}
    one = len(engines) * len(FITTED) + len(families) * len(SCALES)
    return one * (2 if step_time != FALLBACK_KIND else 1)


def in_sample(rows: list[CalRow], step_time: str) -> None:
    """The secondary figure: the shipped fit on every row (in-sample: it saw them all)."""
    params = load_params(step_time=step_time)
    by_index = {r.index: r for r in rows}
    apes = [abs(v / by_index[i].value - 1) * 100 for i, v in score_rows(rows, params)
            if not isinstance(v, str)]
    print(f"\nsecondary: shipped fit.json on all rows (in-sample) {_stats(apes)}")


def pricing_of(row: CalRow, params: PerfParams) -> str:
    """What prices the row's steps under `params`' provider: its measured tables, or the
    roofline fallback where they do not cover the cell (an AMD GPU, a weight format or
    model they lack). Coverage depends on the cell only, not on fitted values."""
    model, gpu = get_model(row.model), get_gpu(row.gpu)
    res = resolve(row.engine_config(model), gpu, model, params,
                  longest_tokens=row.isl + row.osl, harness=row.harness,
                  engine_version=row.engine_version)
    return "roofline fallback" if res.step_time == FALLBACK_KIND else f"{res.step_time} tables"


def _report(rows: list[CalRow], pred: dict[int, float], inside: dict[int, Covered],
            group: str, step_time: str) -> None:
    ape = {i: ape_of(r, pred[i]) for r in rows if (i := r.index) in pred}
    _table("per cell (engine/gpu family/dense|moe/regime; low_batch = closed loop at <= "
           f"{LOW_BATCH_MAX_CONCURRENCY})", grouped(rows, ape, row_cell))
    params = load_params(step_time=step_time)
    _table("per step-time pricing", grouped(rows, ape, lambda r: pricing_of(r, params)))
    _table("per metric", grouped(rows, ape, lambda r: METRIC_GROUPS[r.metric]))
    _table(f"per {group} and metric",
           grouped(rows, ape, lambda r: f"{getattr(r, group)[:30]} {METRIC_GROUPS[r.metric]}"))
    plural = {"family": "families", "source": "sources"}[group]
    print(f"\ninterval coverage (each row's p10-p90 interval for an unseen family, from the "
          f"other {plural}' errors;"
          f" goal >= 80 %): overall {_covered(list(inside.values()))}; "
          f"{sum(r.index in pred and r.index not in inside for r in rows)} held-out rows have "
          "no interval (no group with rows from 3 families: bands.interval_for)")
    for title, key in ((group, lambda r: getattr(r, group)),
                       ("metric", lambda r: METRIC_GROUPS[r.metric])):
        for name, share in _share(rows, inside, key).items():
            print(f"  {title} {name[:50]:50} {share}")


# The code and data a held-out prediction depends on besides the CSV (the CSV's parser,
# recommender/calibration/calibrate.py, is covered by the parsed rows' hash, `rows_sha256`).
# Recursive: the packages hold sub-packages (recommender/sim/, engines/vllm/, ...).
CODE_GLOBS = ("core/**/*.py", "engines/**/*.py", "recommender/**/*.py", "data/catalog/*.yaml",
              "data/calibration/sharegpt_lengths.csv")


def code_sha256() -> str:
    """SHA-256 over CODE_GLOBS' files (names and bytes), calibrate.py left out."""
    digest = hashlib.sha256()
    for path in sorted(p for g in CODE_GLOBS for p in ROOT.glob(g)):
        if path.name != "calibrate.py":
            digest.update(f"{path.relative_to(ROOT).as_posix()}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def rows_sha256(rows: list[CalRow]) -> str:
    """SHA-256 over the parsed rows every fold trains on: a parser rule that drops or
    changes rows (recommender/calibration/calibrate.py) changes every fold's fit, held out or
    not."""
    digest = hashlib.sha256()
    for r in sorted(rows, key=lambda r: r.index):
        digest.update(json.dumps(dataclasses.asdict(r), sort_keys=True).encode() + b"\n")
    return digest.hexdigest()


def _provenance(rows: list[CalRow], step_time: str, group: str) -> dict[str, str]:
    """What a --rows-out file's predictions depend on: a file resumed or turned into bands
    must come from today's CSV, parsed rows, code, procedure, provider and grouping."""
    return {"csv_sha256": hashlib.sha256(DEFAULT_CSV.read_bytes()).hexdigest(),
            "rows_sha256": rows_sha256(rows), "code_sha256": code_sha256(),
            "fit_procedure": PROCEDURE, "step_time": step_time, "group": group}


def _saved(path: str, rows: list[CalRow], group: str, step_time: str
           ) -> tuple[dict[int, float], bool]:
    """(the held-out predictions a --rows-out run wrote, checked against today's rows;
    whether they come from today's CSV, fit procedure, provider and grouping: only then may
    they write bands.json)."""
    saved = json.loads(Path(path).read_text(encoding="utf-8"))
    current = "rows" in saved and all(
        saved.get(k) == v for k, v in _provenance(rows, step_time, group).items())
    by_index = {r.index: r for r in rows}
    pred = {}
    for key, entry in saved.get("rows", saved).items():
        row = by_index.get(int(key))
        if row is None or row.value != entry["measured"] or getattr(row, group) != entry[group]:
            sys.exit(f"{path}: row {key} is not today's calibration row: rerun without "
                     "--rows-in")
        pred[row.index] = float(entry["predicted"])
    return pred, current


def write_rows(path: str, rows: list[CalRow], finished: dict[str, FoldResults], group: str,
               step_time: str) -> None:
    """The --rows-out file: the finished folds' held-out predictions (`_saved` reads them),
    their refusals, which folds are done, and what they depend on (`_provenance`)."""
    by_index = {r.index: r for r in rows}
    held, refused = {}, {}
    for results in finished.values():
        for i, got in results:
            r = by_index[i]
            if isinstance(got, str):
                refused[str(i)] = got
            else:
                held[str(i)] = {"predicted": got, "measured": r.value, "metric": r.metric,
                                "cell": row_cell(r), group: getattr(r, group)}
    write_atomic(path, json.dumps({**_provenance(rows, step_time, group), "rows": held,
                                   "refused": refused, "folds_done": sorted(finished)},
                                  indent=1))


def _resumed(path: str, rows: list[CalRow], group: str, step_time: str
             ) -> dict[str, FoldResults]:
    """{fold: its results} of the folds a --rows-out file of today's CSV, procedure,
    provider and grouping holds (exits otherwise: another file's folds would mix fits)."""
    pred, current = _saved(path, rows, group, step_time)
    if not current:
        sys.exit(f"{path} was not written from today's CSV, fit procedure, --step-time and "
                 "--group: nothing to resume")
    saved = json.loads(Path(path).read_text(encoding="utf-8"))
    refused = {int(i): str(why) for i, why in saved.get("refused", {}).items()}
    fold = folds(rows, group)
    done: dict[str, FoldResults] = {}
    for name in saved.get("folds_done", []):
        members = sorted(r.index for r in rows if fold[r.index] == name)
        done[name] = [(i, pred[i]) if i in pred else (i, refused.get(i, "not in the file"))
                      for i in members if i in pred or i in refused]
    return done


def main() -> int:
    """Print the cross-validated APEs and coverage (headline) and the in-sample line; exit
    0 whether or not the goal is met (it is reported)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="summaries only, no per-row lines")
    ap.add_argument("--write-bands", action="store_true",
                    help=f"store the errors and intervals in {BANDS_FILE.name}")
    ap.add_argument("--group", choices=["family", "source"], default="family",
                    help="what a fold holds out: a publisher family (headline) or a source")
    ap.add_argument("--step-time", default=DEFAULT_KIND, choices=list(PROVIDERS))
    ap.add_argument("--only", help="comma-separated substrings: only these folds")
    ap.add_argument("--no-in-sample", action="store_true", help="skip the secondary line")
    ap.add_argument("--jobs", type=int, default=2, help="folds fitted at once (processes)")
    ap.add_argument("--rows-out", metavar="JSON", help="write every held-out prediction")
    ap.add_argument("--resume", metavar="JSON", help="go on from the folds a --rows-out "
                    "file of today's CSV and procedure holds (it is written after each fold; "
                    "it is then kept up to date unless --rows-out names another file)")
    ap.add_argument("--rows-in", metavar="JSON", help="report on the held-out predictions "
                    "a --rows-out run wrote (no refit: the intervals and their coverage "
                    "after a change to how they are built)")
    args = ap.parse_args()
    if args.write_bands and args.only:
        ap.error("--write-bands needs every fold (no --only)")
    if args.resume and args.rows_in:
        ap.error("--resume goes on fitting; --rows-in reports without fitting: one of them")
    rows, skipped = parse_csv(DEFAULT_CSV)
    shares = {g: sum(getattr(r, args.group) == g for r in rows) / len(rows)
              for g in {getattr(r, args.group) for r in rows}}
    print(f"fit procedure: {PROCEDURE}\nfitted parameters on all rows: "
          f"{fitted_parameters(rows, args.step_time)}; largest {args.group}: "
          f"{max(shares, key=shares.__getitem__)} ({max(shares.values()):.0%} of the rows)\n")
    t0 = time.perf_counter()
    if args.rows_in:
        pred, current = _saved(args.rows_in, rows, args.group, args.step_time)
        refused = []
        if args.write_bands and not current:
            sys.exit(f"{args.rows_in} was not written from today's CSV, fit procedure, "
                     "--step-time and --group: --write-bands needs a fresh run")
    else:
        out = args.rows_out or args.resume
        done = _resumed(args.resume, rows, args.group, args.step_time) if args.resume else None
        pred, refused = cross_validate(
            rows, group=args.group, step_time=args.step_time, quiet=args.quiet,
            jobs=args.jobs, only=args.only.split(",") if args.only else None, done=done,
            on_fold=(lambda finished: write_rows(out, rows, finished, args.group,
                                                 args.step_time)) if out else None)
    inside = coverage(rows, pred, args.group)
    _report(rows, pred, inside, args.group, args.step_time)
    print(f"\n{len(rows)} rows parsed ({len(skipped)} CSV rows skipped by the parser: "
          f"`python -m recommender.calibration.calibrate` lists why), {len(refused)} refused "
          "by predict; "
          f"took {time.perf_counter() - t0:.0f} s")
    for line in refused:
        print(f"  refused {line}")
    overall = [ape_of(by, pred[by.index]) for by in rows if by.index in pred]
    median = float(np.median(overall))
    ttft = [ape_of(r, pred[r.index]) for r in rows if r.index in pred and r.metric == "ttft_s"]
    verdict = "MEETS" if median <= BUDGET_MEDIAN_PCT else "MISSES"
    print(f"HEADLINE leave-one-{args.group}-out median APE of predict (CLI path) {median:.1f} "
          f"% over {len(overall)} held-out rows (p90 {np.percentile(overall, 90):.1f} %; TTFT "
          f"{np.median(ttft) if ttft else float('nan'):.1f} %) vs goal "
          f"{BUDGET_MEDIAN_PCT:.0f} %: {verdict}; interval coverage "
          f"{_covered(list(inside.values()))}")
    if not args.no_in_sample:
        in_sample(rows, args.step_time)
    if args.write_bands:
        write_bands(rows, pred, args.step_time, args.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
