"""Tests for recommender/decision/recommend.py end to end on the bundled sample and real traces:
the pick runs (plug-in check) and exports, reasons name real figures, the SLO warning names
what would attain it, a profile.json is simulated through a synthetic trace, and every
candidate carries its calibration cell's band."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from pydantic import ValidationError

from core.errors import ServeFitError, UsageError
from engines.export.bundle import export_bundle
from engines.export.loading import load_request
from engines.facts import HardwareFacts, ModelFacts
from engines.registry import ENGINES
from profiler.analysis.profile import profile_trace
from profiler.workspace import Workspace
from recommender.decision.export_view import alternative_export, export_view, saved_export
from recommender.decision.recommend import recommend_trace
from recommender.decision.recommendation import Recommendation, RecommendRequest

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BANDS_JSON = ROOT / "data" / "calibration" / "bands.json"


PROGRESS: list[tuple[float, str]] = []


@pytest.fixture(scope="module")
def rec() -> Recommendation:
    return recommend_trace(RecommendRequest(source=str(SAMPLE), gpu="H100-SXM", model=MODEL,
                                            max_requests=1000),
                           progress=lambda f, what: PROGRESS.append((f, what)))


def test_progress_is_reported_in_order(rec: Recommendation) -> None:
    fractions = [f for f, _ in PROGRESS]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) > 4


def test_the_pick_passes_its_engine_check_and_exports(rec: Recommendation, tmp_path) -> None:
    export = export_view(rec)
    assert export.config == rec.pick.config
    assert isinstance(export.hardware, HardwareFacts)
    assert isinstance(export.model_facts, ModelFacts)
    ENGINES[rec.pick.config.engine].check(rec.pick.config, export.hardware, export.model_facts)
    written = export_bundle(export, tmp_path / "bundle")
    config_name, _ = ENGINES[rec.pick.config.engine].config_file(rec.pick.config)
    assert written[0].name == config_name
    report = (tmp_path / "bundle" / "REPORT.md").read_text()
    assert rec.reasons[0].text in report
    assert export.predicted is not None
    assert export.predicted.ttft_s == rec.pick.predicted.ttft_s  # seconds, as simulated
    assert f"- ttft_p95_ms: {rec.pick.predicted.ttft_s.p95 * 1e3:g}" in report  # ms in text
    path = tmp_path / "rec.json"
    path.write_text(rec.model_dump_json())
    # a saved Recommendation is what export reads: its pick's request, built again
    assert load_request(path, recommendation=saved_export) == export


def test_an_alternatives_bundle_says_what_it_is_to_the_pick(rec: Recommendation,
                                                           tmp_path) -> None:
    other = next(c for c in rec.alternatives if c.label != rec.pick.label)
    export = alternative_export(rec, other)
    assert export.config == other.config and export.capacity is None
    report = export_bundle(export, tmp_path / "alt") and \
        (tmp_path / "alt" / "REPORT.md").read_text()
    reasons = report.split("## Reasons")[1]
    assert "None were given" not in reasons
    assert f"Not the pick: {other.config.engine}'s best configuration ({other.label})" in reasons
    assert f"the pick is {rec.pick.config.engine} {rec.pick.label}" in reasons
    d = rec.decision
    pick_only = [r.text for r in rec.reasons if d is None or r.text != d.text]
    assert pick_only and not any(t in report for t in pick_only)  # they explain the pick
    if d is not None and other.label in d.figures:
        assert f"{d.figures[other.label]:.3g} here against {d.figures[d.pick]:.3g}" in reasons
    assert alternative_export(rec, rec.pick) == export_view(rec)


def test_each_candidate_is_stored_once_the_pick_by_its_index(rec: Recommendation,
                                                            tmp_path) -> None:
    data = json.loads(rec.model_dump_json())
    assert not {"pick", "alternatives", "export"} & set(data)
    assert rec.pick is rec.candidates[data["pick_index"]]
    assert rec.alternatives == [rec.candidates[i] for i in data["alternative_indices"]]
    with pytest.raises(ValidationError, match="candidate index 25 out of range: 25"):
        Recommendation.model_validate({**data, "candidates": data["candidates"][:25],
                                       "alternative_indices": [0, 25]})
    # the shape saved before: the pick and its export stored whole beside the candidates
    old = {k: v for k, v in data.items() if k not in ("pick_index", "alternative_indices")}
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({**old, "pick": data["candidates"][0], "export": {}}))
    with pytest.raises(UsageError, match=r"rec\.json: a Recommendation saved by an older "
                       r"ServeFit .*re-run `recommend`"):
        load_request(path, recommendation=saved_export)


def test_ranking_alternatives_and_window(rec: Recommendation) -> None:
    assert rec.pick == rec.candidates[0] == rec.alternatives[0]
    engines = [c.config.engine for c in rec.alternatives]
    assert len(engines) == len(set(engines)) == len(ENGINES)
    # The decision's contenders lead in its order; every other candidate follows by score.
    assert rec.decision is not None and rec.decision.pick == rec.pick.label
    rest = [c.score for c in rec.candidates if c.label not in rec.decision.figures]
    assert rest == sorted(rest, reverse=True)
    assert any(c.pareto for c in rec.candidates)
    assert "busiest 1,000 consecutive requests of 19,366" in rec.window
    assert rec.candidates_simulated >= len(rec.candidates) > len(ENGINES)
    assert rec.pick.config.max_model_len >= 4000  # the sample's prompts reach 14K tokens


def test_reasons_name_real_figures(rec: Recommendation, tmp_path: Path) -> None:
    """Each reason's figure is a profile field (dotted into length stats) or a prediction
    field, and carries that field's value."""
    assert rec.reasons
    profile = profile_trace(str(SAMPLE), workspace=Workspace(tmp_path / "ws.duckdb")).model_dump()
    predicted = rec.pick.predicted.model_dump()
    for reason in rec.reasons:
        if reason.figure.startswith("decision."):  # the decision's figure of the pick
            assert rec.decision is not None and reason.text == rec.decision.text
            assert reason.value == rec.decision.figures[rec.pick.label]
            continue
        head, _, tail = reason.figure.partition(".")
        source = profile if head in profile else predicted
        value = source[head][tail] if tail else source[head]
        assert value == pytest.approx(reason.value), reason


def _holds_the_most_or_says_the_tie(rec: Recommendation) -> None:
    """The pick's SLO boundary is >= every other engine's at the same GPU count, or the
    answer declares the tie and names the rule that broke it."""
    cap, decision = rec.capacity, rec.decision
    assert cap is not None and decision is not None
    assert cap.pick.label == rec.pick.label == decision.pick
    for other in cap.alternatives:
        if other.gpus == cap.pick.gpus and other.rate_rps > cap.pick.rate_rps:
            assert other.label in decision.tied_with, other
            assert decision.rule not in ("figure", "headroom")
    assert rec.reasons[0].text == decision.text
    if decision.tied_with:
        assert "tied within the prediction's error" in decision.text


def test_the_pick_holds_the_most_or_the_tie_is_said(rec: Recommendation) -> None:
    _holds_the_most_or_says_the_tie(rec)
    # The figure is each contender's boundary per GPU, as the capacity search found it.
    for b in [rec.capacity.pick, *rec.capacity.alternatives]:
        assert rec.decision.figures[b.label] == pytest.approx(b.rate_rps / b.gpus)


def test_unattainable_slo_names_what_would_attain_it() -> None:
    rec = recommend_trace(RecommendRequest(source=str(SAMPLE), gpu="L4", model=MODEL,
                                           slo_ttft_p95_s=0.05, slo_tpot_p95_s=0.01,
                                           max_requests=200))
    assert not rec.pick.predicted.slo_met
    [warning] = [w for w in rec.warnings if w.code == "slo_unattainable"]
    gpus = yaml.safe_load((ROOT / "data" / "catalog" / "gpus.yaml").read_text())["gpus"]
    l4 = next(g for g in gpus if g["name"] == "L4")
    size = lambda g: g["memory_gb"] * g["mem_bandwidth_tb_s"]  # noqa: E731
    bigger = min((g for g in gpus if g["vendor"] == "nvidia" and size(g) > size(l4)), key=size)
    assert "2× L4" in warning.text
    assert f"1× {bigger['name']}" in warning.text
    assert "would" in warning.text


def test_a_profile_json_is_simulated_through_a_synthetic_trace(tmp_path: Path) -> None:
    profile = profile_trace(str(SAMPLE), workspace=Workspace(tmp_path / "ws.duckdb"))
    path = tmp_path / "profile.json"
    path.write_text(profile.model_dump_json())
    rec = recommend_trace(RecommendRequest(source=str(path), gpu="H100-SXM", model=MODEL,
                                           max_requests=200))
    assert "synthetic trace of 200 requests" in rec.window
    assert "synthetic_workload" in {w.code for w in rec.warnings}


def test_a_held_profile_and_workspace_are_not_read_again(rec: Recommendation,
                                                        tmp_path: Path) -> None:
    """The app's path: the trace ingested and profiled once, then `recommend_trace` given
    both answers as reading the file does, without ingesting it again."""
    workspace = Workspace(tmp_path / "ws.duckdb")
    profile = profile_trace(str(SAMPLE), workspace=workspace)
    ingested_at = (tmp_path / "ws.duckdb").stat().st_mtime_ns
    held = recommend_trace(rec.request, profile=profile, workspace=workspace)
    assert (tmp_path / "ws.duckdb").stat().st_mtime_ns == ingested_at
    assert held.pick.label == rec.pick.label
    assert held.pick.predicted.output_throughput_tok_s == pytest.approx(
        rec.pick.predicted.output_throughput_tok_s, rel=1e-9)
    assert held.window == rec.window


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("gpu", "H999", "unknown GPU"),
    ("model", "no-such-model", "unknown model"),
    ("source", "does/not/exist.csv", "exist.csv"),
])
def test_bad_input_is_a_servefit_error(field: str, value: str, needle: str) -> None:
    args = {"source": str(SAMPLE), "gpu": "H100-SXM", "model": MODEL, field: value}
    with pytest.raises(ServeFitError, match=needle):
        recommend_trace(RecommendRequest(**args))


def test_long_context_volume_gets_the_disaggregation_warning(tmp_path: Path) -> None:
    """A seeded Azure-format trace whose median prompt is ~40K tokens (no bundled trace has
    long-context volume): disaggregation is considered and explained, not silently skipped."""
    rng = np.random.default_rng(0)
    n = 200
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.cumsum(rng.exponential(1.0, n)),
                                                          unit="s")
    trace = tmp_path / "long.csv"
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"),
                  "ContextTokens": rng.integers(33_000, 60_000, n),
                  "GeneratedTokens": rng.integers(20, 200, n)}).to_csv(trace, index=False)
    rec = recommend_trace(RecommendRequest(source=str(trace), gpu="H100-SXM", model=MODEL))
    [warning] = [w for w in rec.warnings if w.code == "disaggregation"]
    assert "input_tokens.p50" in warning.text and "32,000" in warning.text
    assert rec.pick.config.disaggregation is None  # export cannot package it yet
    assert rec.pick.config.max_model_len >= 60_000
    _holds_the_most_or_says_the_tie(rec)  # a trace of another shape: 40K-token prompts


def test_a_model_that_fits_nowhere_says_why() -> None:
    with pytest.raises(ServeFitError, match=r"no configuration of .*DeepSeek-V3 fits on 1× L4"):
        recommend_trace(RecommendRequest(source=str(SAMPLE), gpu="L4",
                                         model="deepseek-ai/DeepSeek-V3", max_requests=500))


def test_multi_turn_conversations_get_prefix_caching_with_its_effect() -> None:
    """ShareGPT conversations (no timestamps: Poisson arrivals at 2 req/s): each turn repeats
    the conversation so far, so prefix caching stays on and the reason quotes its effect."""
    sharegpt = ROOT / "tests" / "data" / "traces" / "sharegpt_head1000.json.gz"
    rec = recommend_trace(RecommendRequest(source=str(sharegpt), gpu="H100-SXM", model=MODEL,
                                           arrival_rate_rps=2.0, max_requests=150))
    assert rec.pick.config.prefix_caching is not False
    [reason] = [r for r in rec.reasons if r.figure == "prefix_reuse_infinite"]
    assert reason.value > 0.3
    assert "prefix caching on cuts" in reason.text
    off = rec.pick.config.model_copy(update={"prefix_caching": False})
    assert all(c.config != off or c.score <= rec.pick.score for c in rec.candidates)
    _holds_the_most_or_says_the_tie(rec)  # a trace of another shape: multi-turn, Poisson


def test_every_candidate_carries_its_cells_band_from_bands_json(rec: Recommendation,
                                                                 tmp_path: Path) -> None:
    """The replay is open-loop: its cell's regime is the closed loop at one replica's mean
    occupancy (Little's law, throughput × mean E2E: ≤ 4 low batch, above fixed concurrency);
    the band is that cell's entry of data/calibration/bands.json, read here from the file."""
    cells = json.loads(BANDS_JSON.read_text())["cells"]
    calibrated = 0
    for c in rec.candidates:
        p = c.predicted
        occupancy = round(p.request_throughput_rps / c.replicas * p.e2e_s.mean)
        regime = "low_batch" if occupancy <= 4 else "fixed_concurrency"
        cell = f"{c.config.engine}/hopper/dense/{regime}"  # H100 is Hopper, Llama-3.1 dense
        assert p.calibration_cell == cell, c.label
        if cell in cells:
            calibrated += 1
            assert p.band is not None and p.band.cell == cell
            assert p.band.median_ape == cells[cell]["median_ape"]
            assert p.band.rows == cells[cell]["rows"]
        else:
            assert p.band is None, c.label
    assert calibrated > 0  # the sample's candidates include cells published rows back
    # The pick's band and the warning agree: a pick outside every calibrated cell says so.
    uncalibrated = "uncalibrated_cell" in {w.code for w in rec.warnings}
    assert uncalibrated == (rec.pick.predicted.band is None)
    export = export_view(rec)
    assert export.predicted is not None and export.predicted.band == rec.pick.predicted.band
    export_bundle(export, tmp_path / "bundle")
    report = (tmp_path / "bundle" / "REPORT.md").read_text()
    pick_cell = rec.pick.predicted.calibration_cell
    assert f"`{pick_cell}`" in report
    if pick_cell in cells:
        band = cells[pick_cell]
        assert (f"Error band: ±{band['median_ape'] * 100:.0f} %" in report
                and f"covered by {band['rows']} held-out measurements" in report)
    else:
        assert "Uncalibrated: no published measurement covers cell" in report


@pytest.mark.slow
def test_an_unservable_window_leads_the_answer_with_what_would_serve_it(tmp_path) -> None:
    """Mooncake's conversation trace (prompts to 126K tokens) on one H100: no configuration
    searched serves every request; the answer says so first, with the count the simulation
    itself rejected, and names a configuration that serves them (simulated)."""
    import re

    trace = ROOT / "tests" / "data" / "traces" / "mooncake_conversation_trace.jsonl.gz"
    rec = recommend_trace(RecommendRequest(source=str(trace), gpu="H100-SXM", model=MODEL,
                                           max_requests=3000))
    first = rec.warnings[0]
    assert first.code == "unservable" and not rec.pick.feasible
    found = re.match(r"([\d,]+) of ([\d,]+) simulated requests \(\d+%\) can never be served",
                     first.text)
    assert found is not None, first.text
    assert int(found[1].replace(",", "")) == rec.pick.predicted.rejected_requests > 0
    assert "serves every request and keeps up" in first.text.split("What would serve")[1]
    assert rec.decision is not None and rec.decision.rule == "infeasible"
    export_bundle(export_view(rec), tmp_path / "bundle")
    report = (tmp_path / "bundle" / "REPORT.md").read_text().splitlines()
    assert report[2] == f"> **Not deployable as it is.** {first.text}"
