"""The calibrated path is the user's path: every calibration row, stated as `predict` flags,
gives through `python -m app predict … --json` exactly what bench/predict_accuracy.py scores
(and what the fit fits: `CalRow.request`).

Fast: every row's flags parse into the same request the bench and the fit use, none is
skipped for parallelism, precision label or per-GPU metric; one row per family, engine,
harness and load shape is answered through `app.cli.main.main` and a real `python -m app
predict` process and compared with the bench's score. Slow: one row per source.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main
from recommender.calibration.answers import refusal
from recommender.calibration.cal_row import CalRow
from recommender.calibration.published.parse import parse_csv
from recommender.catalog.lookup import get_model
from recommender.model.params import load_params
from tests.bench.modules import bench_module

REPO = Path(__file__).resolve().parents[2]
# The row's metric → where `predict --json` puts it (latencies: ms, the mean).
JSON_KEY = {"ttft_s": ("ttft_ms", 1e-3), "tpot_s": ("tpot_ms", 1e-3),
            "itl_s": ("itl_ms", 1e-3), "e2e_s": ("e2e_ms", 1e-3),
            "output_throughput_tok_s": ("output_throughput_tok_s", 1.0),
            "total_throughput_tok_s": ("total_throughput_tok_s", 1.0),
            "request_throughput_rps": ("request_throughput_rps", 1.0)}


BENCH = bench_module("predict_accuracy")
ROWS, SKIPPED = parse_csv()
BY_INDEX = {r.index: r for r in ROWS}


def _from_json(text: str, row: CalRow) -> float:
    key, factor = JSON_KEY[row.metric]
    value = json.loads(text)[key]
    return (value["mean"] if isinstance(value, dict) else value) * factor


def _cli_value(row: CalRow, capsys: pytest.CaptureFixture[str]) -> float:
    assert main(["predict", *row.predict_argv(), "--json"]) == 0
    return _from_json(capsys.readouterr().out, row)


def test_every_rows_flags_make_the_request_the_bench_and_the_fit_use():
    assert len(ROWS) > 3000
    for row in ROWS:
        assert BENCH.cli_request(row, "measured") == row.request("measured"), row.index


def test_no_row_is_skipped_for_parallelism_precision_or_per_gpu_metric():
    reasons = [why for _, why in SKIPPED]
    assert not [w for w in reasons if "precision" in w or "per-GPU" in w or "per GPU" in w]
    # The two LMSYS rows are a 96-GPU prefill/decode-disaggregated deployment (its
    # parallelism column says so); disaggregation is not a layout predict serves.
    parallel = [w for w in reasons if "parallelism" in w]
    assert all("disaggregation" in w.lower() for w in parallel) and len(parallel) <= 2


def _simulated(row: CalRow) -> int:
    """Requests the row's prediction simulates (its cost)."""
    return row.num_requests or max(10 * (row.concurrency or 1), 200)


def _one_per(key, refused=None) -> list[CalRow]:
    """The cheapest row to simulate of each `key` group that neither side refuses (both
    refuse alike; the bench counts it): `refused(row)`, by default a request past the
    model's positions (checked by its lengths: pricing every row builds every step table)."""
    refused = refused or (lambda r: r.isl + r.osl > get_model(r.model).max_context_tokens)
    seen: dict[object, CalRow] = {}
    for row in sorted(ROWS, key=_simulated):
        if refused(row):
            continue
        seen.setdefault(key(row), row)
    return list(seen.values())


def _kind(row: CalRow) -> tuple:
    """What a row exercises of the path: its family, engine, harness and load shape."""
    return (row.family, row.engine, row.harness, row.load().arrival.kind, row.dp > 1)


@pytest.mark.parametrize("row", _one_per(_kind), ids=lambda r: f"row{r.index}")
def test_cli_answers_what_the_bench_scores(row, capsys):
    expected = BENCH.score(row, load_params())
    assert math.isclose(_cli_value(row, capsys), expected, rel_tol=1e-12)


def test_a_real_predict_process_answers_what_the_bench_scores():
    row = min((r for r in ROWS if r.harness == "in_process"), key=_simulated)
    out = subprocess.run([sys.executable, "-m", "app", "predict", *row.predict_argv(),
                          "--json"], cwd=REPO, capture_output=True, text=True, check=True)
    assert math.isclose(_from_json(out.stdout, row), BENCH.score(row, load_params()),
                        rel_tol=1e-12)


@pytest.mark.slow
# ~450 sources, each a simulation and, on a fresh machine, most a step-table build: minutes
# on an idle 2-core machine, more beside other work, where the suite's 300 s cut it short.
@pytest.mark.timeout(1800)
def test_every_source_through_the_cli_answers_what_the_bench_scores(capsys):
    # One row per source (each publication's cheapest): the flags of every row are checked
    # to make the bench's request above, so a source's rows differ from it only in numbers.
    params = load_params()
    for row in _one_per(lambda r: r.source, lambda r: refusal(r, params) is not None):
        expected = BENCH.score(row, params)
        assert math.isclose(_cli_value(row, capsys), expected, rel_tol=1e-12), row.index


def test_the_bench_scores_coverage_with_the_interval_predict_would_show():
    """A held-out row predict would call outside the calibrated range (an AMD GPU, or a
    release the other families never measured) is scored against the pooled wider interval
    predict shows for it, not against its own cell's."""
    rows = ROWS
    amd = next(r for r in rows if r.gpu == "MI300X")
    nvidia = next(r for r in rows if r.gpu != "MI300X" and r.engine == "vllm"
                  and r.engine_version)
    releases = BENCH._releases(rows)
    assert BENCH._outside(amd, releases)
    assert not BENCH._outside(nvidia, releases)
    others = BENCH._releases([r for r in rows if r.engine_version != nvidia.engine_version])
    assert BENCH._outside(nvidia, others) == (nvidia.engine_version.rsplit(".", 1)[0]
                                             not in others["vllm"])


def test_saved_predictions_write_bands_only_from_todays_csv_and_procedure(tmp_path):
    """--rows-in --write-bands rebuilds bands.json from a --rows-out file only when that
    file names today's CSV hash, parsed rows, fit procedure, provider and grouping."""
    rows = ROWS[:3]
    held = {str(r.index): {"predicted": r.value * 1.1, "measured": r.value,
                           "metric": r.metric, "family": r.family} for r in rows}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({**BENCH._provenance(ROWS, "measured", "family"), "rows": held}))
    pred, current = BENCH._saved(str(path), ROWS, "family", "measured")
    assert current and pred == {r.index: r.value * 1.1 for r in rows}
    assert not BENCH._saved(str(path), ROWS, "family", "roofline")[1]
    stale = {**BENCH._provenance(ROWS, "measured", "family"), "csv_sha256": "0" * 64, "rows": held}
    path.write_text(json.dumps(stale))
    assert not BENCH._saved(str(path), ROWS, "family", "measured")[1]
    # a parser rule that drops a row no fold held out here still changes every fit
    path.write_text(json.dumps({**BENCH._provenance(ROWS, "measured", "family"),
                                "rows": held}))
    assert not BENCH._saved(str(path), ROWS[:-1], "family", "measured")[1]
    path.write_text(json.dumps(held))  # a file from before the provenance: report only
    assert BENCH._saved(str(path), ROWS, "family", "measured") == (pred, False)
    held[str(rows[0].index)]["measured"] += 1.0
    path.write_text(json.dumps(held))
    with pytest.raises(SystemExit, match="not today's calibration row"):
        BENCH._saved(str(path), ROWS, "family", "measured")


def test_a_run_resumes_from_the_folds_its_checkpoint_holds(tmp_path, capsys):
    """--rows-out is written after each fold; --resume reports those folds without
    refitting them (here every fold asked for is in the file, so nothing is fitted)."""
    fold = BENCH.folds(ROWS, "family")
    names = sorted(set(fold.values()))[:2]
    finished = {}
    for name in names:
        members = sorted(r.index for r in ROWS if fold[r.index] == name)
        finished[name] = [(i, "refused: test") if k == 0 else (i, 1.25 * BY_INDEX[i].value)
                          for k, i in enumerate(members)]
    path = tmp_path / "rows.json"
    BENCH.write_rows(str(path), ROWS, finished, "family", "measured")
    done = BENCH._resumed(str(path), ROWS, "family", "measured")
    assert done == finished
    pred, refused = BENCH.cross_validate(ROWS, group="family", step_time="measured",
                                         quiet=True, only=names, jobs=1, done=done)
    want = {i: v for results in finished.values() for i, v in results if not isinstance(v, str)}
    assert pred == want and len(refused) == 2
    assert "2 resumed from a checkpoint" in capsys.readouterr().out
    stale = json.loads(path.read_text()) | {"fit_procedure": "another"}
    path.write_text(json.dumps(stale))
    with pytest.raises(SystemExit, match="nothing to resume"):
        BENCH._resumed(str(path), ROWS, "family", "measured")


def _fake_fold(rows, fold, held, step_time):
    """A fold's results without its fit: every held-out row predicted at its measured value
    (module level: the bench's process pool pickles it by name)."""
    return 0.0, [(r.index, r.value) for r in rows if fold[r.index] == held]


def test_a_resumed_run_narrowed_by_only_keeps_the_other_folds_in_its_checkpoint(monkeypatch):
    """--resume FILE --only B: B's fold is fitted and the checkpoint rewritten; the folds
    FILE held besides B stay in it (they were dropped: a narrowed run lost its checkpoint).
    The fit itself is replaced here: what is checked is the checkpoint's bookkeeping."""
    fold = BENCH.folds(ROWS, "family")
    first, second = sorted(set(fold.values()))[:2]
    done = {first: [(r.index, 2.0 * r.value) for r in ROWS if fold[r.index] == first]}
    monkeypatch.setattr(BENCH, "_fold", _fake_fold)
    written = []
    BENCH.cross_validate(ROWS, group="family", step_time="measured", quiet=True,
                         only=[second], jobs=1, done=done, on_fold=written.append)
    assert len(written) == 1 and set(written[0]) == {first, second}
    assert written[0][first] == done[first]
    assert written[0][second] == [(r.index, r.value) for r in ROWS if fold[r.index] == second]
