"""`python -m app recommend`: JSON keys (with each candidate's band and coverage), -o then
export, the text view's band line, and one line with exit 2 and no file on bad input.

The human view and the missing trace go through a real `python -m app` subprocess (start-up,
the process's exit status and streams); the others call the CLI in this process (the `cli`
fixture): the same command logic without a new interpreter and its imports each time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.workspace import Workspace
from recommender.decision.recommendation import Recommendation
from runners.benchmark.stored_runs import load_run
from tests.runners.fake_openai import write_stand_in

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BANDS_JSON = ROOT / "data" / "calibration" / "bands.json"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _pick(printed: dict) -> dict:
    """The picked candidate of a Recommendation's JSON (an index into its candidates)."""
    return printed["candidates"][printed["pick_index"]]


def test_json_then_export_round_trip(cli, tmp_path: Path) -> None:
    out = cli("recommend", str(SAMPLE), "--gpu", "H100-SXM", "--model", MODEL,
                  "--slo-ttft-p95-ms", "500", "--slo-tpot-p95-ms", "50",
                  "--max-requests", "500", "--json", "-o", "rec.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert set(printed) == set(Recommendation.model_fields)
    assert printed["request"]["slo_ttft_p95_s"] == pytest.approx(0.5)
    assert json.loads((tmp_path / "rec.json").read_text()) == printed
    assert _pick(printed)["predicted"]["goodput_rps"] is not None
    exported = cli("export", "rec.json", "--out", "bundle", "--json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    files = json.loads(exported.stdout)["files"]
    assert all((tmp_path / f).is_file() for f in files)
    report = (tmp_path / "bundle" / "REPORT.md").read_text()
    assert printed["reasons"][0]["text"] in report
    # the decision: what ranked, the pick's confidence against the other engine's best (in
    # the first reason, so in REPORT.md too)
    decision = printed["decision"]
    assert decision["pick"] == _pick(printed)["label"]
    assert printed["reasons"][0]["text"] == decision["text"]
    if decision["confidence"] is not None:
        assert 0.0 <= decision["confidence"] <= 1.0
        assert f"= {decision['confidence']:.0%}" in report
    _capacity_is_carried_and_reported(printed, report)
    _prices_are_gpu_hours_over_tokens(printed, report)
    # every candidate carries its cell and the cell's band (with its coverage) from bands.json
    cells = json.loads(BANDS_JSON.read_text())["cells"]
    for candidate in printed["candidates"]:
        predicted = candidate["predicted"]
        cell = predicted["calibration_cell"]
        expected = cells.get(cell)
        assert predicted["band"] == (None if expected is None else {"cell": cell, **expected})
    pick = _pick(printed)["predicted"]
    if pick["band"] is None:
        assert f"covers cell `{pick['calibration_cell']}`" in report
    else:
        assert (f"±{pick['band']['median_ape'] * 100:.0f} %" in report
                and f"covered by {pick['band']['rows']} held-out measurements" in report)
    _bench_launches_a_saved_pick(printed, cli, tmp_path)


def _bench_launches_a_saved_pick(printed: dict, cli, tmp_path: Path) -> None:
    """`bench --launch local --config rec.json` on a saved Recommendation launches its pick
    (stored once, by index) from --engine-venv's bin/: here a stand-in `vllm` serving the
    fake engine, so the pick is pointed at the window's vLLM candidate."""
    saved = dict(printed)
    saved["pick_index"] = next(i for i, c in enumerate(printed["candidates"])
                               if c["config"]["engine"] == "vllm")
    (tmp_path / "vllm-rec.json").write_text(json.dumps(saved))
    write_stand_in(tmp_path / "venv" / "bin", "vllm")
    out = cli("bench", "--launch", "local", "--config", "vllm-rec.json", "--engine-venv",
              str(tmp_path / "venv"), "--log-dir", "logs", "--workload", "concurrency",
              "--concurrency", "2", "--num-requests", "4", "--prompt-tokens", "16",
              "--output-tokens", "3", "--workspace", "w.duckdb", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["completed"] == 4
    [log] = (tmp_path / "logs").iterdir()
    assert "fake engine serving" in log.read_text()
    launched = load_run(Workspace(tmp_path / "w.duckdb"), got["run_id"]).info.config
    assert launched == saved["candidates"][saved["pick_index"]]["config"]


def _prices_are_gpu_hours_over_tokens(printed: dict, report: str) -> None:
    """$/Mtok at the catalog's H100 price: each candidate's GPUs x price over its output
    tokens an hour; the boundaries' and growth rows' figures scale as GPUs over load."""
    price = printed["gpu_price"]
    assert price["usd_per_hour"] > 0 and price["read_on"] and price["source"]
    for c in printed["candidates"]:
        gpus = c["replicas"] * c["config"]["tp"] * c["config"]["dp"]
        tok_h = c["predicted"]["output_throughput_tok_s"] * 3600
        assert c["usd_per_mtok"] == pytest.approx(gpus * price["usd_per_hour"] / tok_h * 1e6)
    cap = printed["capacity"]
    bounds = [cap["pick"], *cap["alternatives"]]
    scale = {round(b["usd_per_mtok"] * b["rate_rps"] / b["gpus"], 9) for b in bounds}
    assert len(scale) == 1  # one mean output length, one price
    rows = [g for g in cap["growth"] if g["pick_gpus"] is not None]
    assert len({round(g["usd_per_mtok"] * g["factor"] / g["pick_gpus"], 9) for g in rows}) <= 1
    assert f"usd_per_mtok_today: {_pick(printed)['usd_per_mtok']:g}" in report


def _capacity_is_carried_and_reported(printed: dict, report: str) -> None:
    """`capacity` in the JSON: the pick's boundary with its band, multiples of the trace's
    mean and peak, the growth table; REPORT.md states the same boundary and table."""
    from core.capacity import Capacity
    from core.capacity_text import boundary_text, day_text, growth_table

    cap = Capacity.model_validate(printed["capacity"])
    b, predicted = cap.pick, _pick(printed)["predicted"]
    assert b.label == _pick(printed)["label"] and b.rate_rps > 0
    # the boundary's range is the pick's throughput interval (a load is off by as much as
    # the throughput it rests on), else its cell's median error
    interval, band = predicted["intervals"].get("throughput"), predicted["band"]
    if interval is not None:
        assert b.rate_low_rps == pytest.approx(b.rate_rps * interval["low"])
        assert b.rate_high_rps == pytest.approx(b.rate_rps * interval["high"])
    elif band is not None:
        assert b.rate_low_rps == pytest.approx(b.rate_rps * (1 - band["median_ape"]))
        assert b.rate_high_rps == pytest.approx(b.rate_rps * (1 + band["median_ape"]))
    assert b.multiple_of_mean == pytest.approx(b.rate_rps / cap.mean_rps)
    assert cap.peak_rps is not None and b.multiple_of_peak == pytest.approx(
        b.rate_rps / cap.peak_rps)
    assert [g.factor for g in cap.growth] == [2.0, 5.0, 10.0]
    assert {a.engine for a in cap.alternatives} == (
        {printed["candidates"][i]["config"]["engine"] for i in printed["alternative_indices"]}
        - {b.engine})
    # the search's loads: the ones at or under the boundary hold, the ones over it do not
    assert all(p.holds == (p.rate_rps <= b.rate_rps * (1 + 1e-9)) for p in cap.curve.points)
    assert "## How far it holds" in report and boundary_text(b) in report
    assert all(row["traffic"] in report for row in growth_table(cap))
    assert "xychart-beta" in report
    # the day plan over the trace's span: in the JSON, and in REPORT.md with its table
    assert cap.day is not None and day_text(cap.day) in report
    assert len([line for line in report.splitlines() if line.startswith("| ")
                and line.count("|") == 6]) >= len(cap.day.windows)


@pytest.fixture(scope="module")
def human_run(tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[subprocess.CompletedProcess, Path]:
    """One real `python -m app recommend` of the sample: the human view on stdout, the
    Recommendation in -o's file (the two view tests share the process)."""
    cwd = tmp_path_factory.mktemp("human")
    out = run_cli("recommend", str(SAMPLE), "--gpu", "H100-SXM", "--model", MODEL,
                  "--max-requests", "300", "-o", "rec.json", cwd=cwd)
    return out, cwd


def test_text_view_shows_the_picks_band_or_no_calibrated_cell(human_run) -> None:
    from app.cli.recommend import recommendation_text

    out, cwd = human_run
    assert out.returncode == 0, out.stderr
    rec = Recommendation.model_validate_json((cwd / "rec.json").read_text())
    cells = json.loads(BANDS_JSON.read_text())["cells"]
    # The view of a covered pick: the best candidate whose cell is calibrated (the sample's
    # own pick need not be: which engine wins is the search's business, not this test's).
    index, covered = next((i, c) for i, c in enumerate(rec.candidates)
                          if c.predicted.calibration_cell in cells)
    rec = rec.model_copy(update={"pick_index": index})
    cell = covered.predicted.calibration_cell
    entry = cells[cell]
    band_line = next(line for line in recommendation_text(rec).splitlines()
                     if line.startswith("Band"))
    assert band_line == (f"Band      ±{entry['median_ape'] * 100:.0f} % (cell {cell}, "
                         f"{entry['rows']} held-out rows)")
    bare = rec.pick.predicted.model_copy(update={"band": None})
    candidates = list(rec.candidates)
    candidates[index] = rec.pick.model_copy(update={"predicted": bare})
    uncalibrated = rec.model_copy(update={"candidates": candidates})
    assert (f"Band      no calibrated cell ({cell}: no published measurement covers it)"
            in recommendation_text(uncalibrated).splitlines())


def test_human_view_shows_pick_reasons_and_alternatives(human_run) -> None:
    out, cwd = human_run
    assert out.returncode == 0, out.stderr
    for heading in ("Pick", "Decided   ranked by SLO boundary per GPU", "Predicted", "Band",
                    "Why", "Alternatives (best per engine)", "Holds     up to", "Growth",
                    "Day plan  ", "  GPUs per window, in order: ", "Price     $"):
        assert heading in out.stdout
    assert " ms" in out.stdout
    # the human view printed, the JSON in -o's file; no workspace litter without --workspace
    assert [p.name for p in cwd.iterdir()] == ["rec.json"]
    rec = Recommendation.model_validate_json((cwd / "rec.json").read_text())
    assert rec.pick.label in out.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("--gpu", "H999", "--model", MODEL), "unknown GPU 'H999'"),
    (("--gpu", "H100-SXM", "--model", "nope/nope"), "unknown model"),
    (("--gpu", "H100-SXM", "--model", MODEL, "--gpus", "0"), "--gpus"),
    (("--gpu", "H100-SXM", "--model", MODEL, "--spec-acceptance", "ngram"), "METHOD=RATE"),
    (("--gpu", "H100-SXM", "--model", MODEL, "--spec-acceptance", "ngram=1.5"),
     "--spec-acceptance"),
    (("--gpu", "H100-SXM", "--model", MODEL, "--spec-acceptance", "medusa=0.5"),
     "--spec-acceptance"),
    # the error names the flag typed, not the request field behind it (units differ)
    (("--gpu", "H100-SXM", "--model", MODEL, "--gpu-price-per-hour", "-1"),
     "--gpu-price-per-hour: "),
    (("--gpu", "H100-SXM", "--model", MODEL, "--gpu-price-per-hour", "nan"),
     "--gpu-price-per-hour: "),
    (("--gpu", "H100-SXM", "--model", MODEL, "--slo-ttft-p95-ms", "0"), "--slo-ttft-p95-ms: "),
    (("--gpu", "H100-SXM", "--model", MODEL, "--arrival-rate", "-2"), "--arrival-rate: "),
])
def test_bad_input_is_one_line_exit_2_and_no_file(cli, tmp_path: Path, args, needle) -> None:
    out = cli("recommend", str(SAMPLE), *args, "-o", "rec.json", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "rec.json").exists()


def test_missing_trace_is_exit_2_and_no_file(tmp_path: Path) -> None:
    out = run_cli("recommend", "missing.csv", "--gpu", "H100-SXM", "--model", MODEL,
                  "-o", "rec.json", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "rec.json").exists()


def test_trace_without_timestamps_asks_for_a_rate(cli, tmp_path: Path) -> None:
    sharegpt = ROOT / "tests" / "data" / "traces" / "sharegpt_head1000.json.gz"
    out = cli("recommend", str(sharegpt), "--gpu", "H100-SXM", "--model", MODEL,
                  "-o", "rec.json", cwd=tmp_path)
    assert out.returncode == 2 and "--arrival-rate" in out.stderr
    assert not (tmp_path / "rec.json").exists()


def test_a_trace_at_one_instant_states_no_rate(cli, tmp_path: Path) -> None:
    trace = tmp_path / "two.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n0,100,50\n0,200,20\n")
    out = cli("recommend", str(trace), "--gpu", "H100-SXM", "--model", MODEL,
              "-o", "rec.json", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "arrive at one instant" in out.stderr and "--arrival-rate" in out.stderr
    assert not (tmp_path / "rec.json").exists()
