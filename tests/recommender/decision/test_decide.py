"""Tests for recommender/decision/decide.py: the goodput objective ranks by SLO boundary per GPU,
ties are called within the combined p10-p90 error and broken in the stated order, and the
decision names the rule that decided."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from scipy.stats import norm

from core.capacity import Boundary
from core.figures import Band, Interval, Latency
from engines.config import EngineConfig
from recommender.decision.decide import Contender, confidence, decide, tied
from recommender.decision.recommendation import PredictedMetrics
from recommender.decision.scoring import Evaluation

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _lat(s: float) -> Latency:
    return Latency(count=10, mean=s, p50=s, p90=s, p95=s, p99=s)


def _contender(name: str, boundary_rps: float, *, width: float | None = 1.2, gpus: int = 1,
               calibrated: bool = True, feasible: bool = True, knobs: int = 0,
               engine: str = "vllm", ttft_s: float = 0.1, basis: str = "c") -> Contender:
    """A candidate whose throughput interval is [1/width, width] (None: no interval)."""
    intervals = {} if width is None else {
        group: Interval(metric=group, low=1 / width, high=width, basis=basis, rows=50,
                        pooled=False) for group in ("throughput", "e2e")}
    predicted = PredictedMetrics(
        ttft_s=_lat(ttft_s), tpot_s=_lat(0.01), itl_s=_lat(0.01), e2e_s=_lat(1.0),
        output_throughput_tok_s=100.0, total_throughput_tok_s=200.0,
        request_throughput_rps=1.0, kv_headroom_fraction=0.5, slo_met=True,
        band=Band(cell="c", median_ape=0.1, rows=50) if calibrated else None,
        intervals=intervals)
    knob_values = {"max_num_seqs": 64, "max_batched_tokens": 4096, "prefix_caching": True}
    config = EngineConfig(engine=engine, model=MODEL, tp=gpus,
                          **dict(list(knob_values.items())[:knobs]))
    evaluation = Evaluation(config, 1, predicted, 1.0, 1.0, feasible,
                            None if feasible else "falls behind")
    boundary = Boundary(label=name, engine=engine, replicas=1, gpus=gpus,
                        rate_rps=boundary_rps, multiple_of_mean=boundary_rps,
                        multiple_of_peak=None, binding="compute", simulations=8)
    return Contender(evaluation, name, boundary)


def test_the_highest_boundary_beyond_the_error_wins_whatever_the_search_order():
    # 1.2x intervals: h = ln 1.2 per side; combined sqrt(2) ln 1.2 = 0.258 in log; 14 vs 11
    # is ln(14 / 11) = 0.241: tied; 14 vs 9 (0.44) is not.
    sglang, trtllm = _contender("sglang", 9.0), _contender("trtllm", 14.0, engine="trtllm")
    ordered, decision = decide([sglang, trtllm], "goodput", 200.0)
    assert [c.label for c in ordered] == ["trtllm", "sglang"]
    assert (decision.pick, decision.rule, decision.tied_with) == ("trtllm", "figure", [])
    assert decision.figures == {"sglang": 9.0, "trtllm": 14.0}
    assert "14 req/s" in decision.text and "beyond the error" in decision.text


def test_the_tie_test_is_the_log_difference_against_the_combined_half_widths():
    a = _contender("a", 14.0)
    h = math.log(1.2)  # each side's half-width: ln(1.2 / (1 / 1.2)) / 2
    edge = 14.0 * math.exp(-math.hypot(h, h))
    assert tied(a, _contender("b", edge * 1.001), "goodput", 200.0)
    assert not tied(a, _contender("b", edge * 0.999), "goodput", 200.0)
    # No interval at all: nothing says the difference is real.
    assert tied(a, _contender("b", 1.0, width=None), "goodput", 200.0)


def test_a_tie_is_said_and_broken_by_headroom_first():
    high, low = _contender("sglang", 12.0), _contender("vllm", 11.0, gpus=1)
    ordered, decision = decide([low, high], "goodput", 200.0)
    assert ordered[0].label == "sglang"
    assert (decision.rule, decision.tied_with) == ("headroom", ["vllm"])
    assert "tied within the prediction's error with vllm" in decision.text
    assert "higher SLO boundary per GPU" in decision.text


@pytest.mark.parametrize(("other", "rule"), [
    ({"gpus": 2}, "fewer_gpus"),
    ({"calibrated": False}, "calibrated"),
    ({"knobs": 2}, "simpler"),
])
def test_equal_headroom_falls_to_gpus_then_calibration_then_simplicity(other, rule):
    # Boundaries per GPU equal (2 GPUs hold twice the load); the search order favours the
    # loser, so only the rule can put the winner first.
    rate = 10.0 * other.get("gpus", 1)
    loser = _contender("loser", rate, **other)
    winner = _contender("winner", 10.0)
    ordered, decision = decide([loser, winner], "goodput", 200.0)
    assert (ordered[0].label, decision.rule) == ("winner", rule)


def test_nothing_tells_them_apart_keeps_the_search_order():
    first, second = _contender("first", 10.0), _contender("second", 10.0)
    ordered, decision = decide([first, second], "goodput", 200.0)
    assert [c.label for c in ordered] == ["first", "second"]
    assert decision.rule == "order"


def test_an_infeasible_candidate_never_contends_while_a_feasible_one_exists():
    broken = _contender("broken", 100.0, feasible=False)
    ok = _contender("ok", 1.0)
    ordered, decision = decide([broken, ok], "goodput", 200.0)
    assert [c.label for c in ordered] == ["ok", "broken"]
    assert decision.tied_with == []


def test_the_latency_objective_ranks_lower_first_and_breaks_ties_by_headroom():
    # Latency = p95 TTFT + p95 TPOT x 199: 0.1 + 1.99 = 2.09 s against 2.19 s, inside the
    # 1.2x intervals' error: tied, the higher boundary decides.
    fast, roomy = _contender("fast", 5.0, ttft_s=0.1), _contender("roomy", 8.0, ttft_s=0.2)
    ordered, decision = decide([fast, roomy], "latency", 200.0)
    assert ordered[0].label == "roomy"
    assert (decision.rule, decision.tied_with) == ("headroom", ["fast"])
    assert decision.figures["fast"] == pytest.approx(0.1 + 0.01 * 199)
    # Beyond the error the faster one wins outright.
    slow = _contender("slow", 8.0, ttft_s=2.0)
    ordered, decision = decide([slow, fast], "latency", 200.0)
    assert (ordered[0].label, decision.rule) == ("fast", "figure")


def test_confidence_without_stored_quantiles_is_the_normal_with_the_intervals_p10_p90(
        tmp_path):
    # No bands file: each error is N(0, s) with p90 = ln(width); the pick beats the runner
    # when ln(12 / 10) + ea - eb > 0: Phi(ln 1.2 / (s sqrt 2)).
    missing = tmp_path / "none.json"
    pick, runner = _contender("a", 12.0, width=1.5), _contender("b", 10.0, width=1.5)
    s = math.log(1.5) / norm.ppf(0.9)
    expected = norm.cdf(math.log(1.2) / (s * math.sqrt(2)))
    got = confidence(pick, runner, "goodput", 200.0, seed=3, bands_file=missing)
    assert got == pytest.approx(expected, abs=0.01)
    assert got == confidence(pick, runner, "goodput", 200.0, seed=3, bands_file=missing)
    same = confidence(_contender("a", 10.0), _contender("b", 10.0), "goodput", 200.0,
                      seed=0, bands_file=missing)
    assert same == pytest.approx(0.5, abs=0.01)
    assert confidence(pick, _contender("b", 10.0, width=None), "goodput", 200.0,
                      seed=0, bands_file=missing) is None


def test_confidence_draws_from_the_groups_stored_errors(tmp_path):
    # The runner's group says measurements come in at 2x its prediction, every time; the
    # pick's at 1x: 12 against 2 x 10 loses always, though the pick's figure is higher.
    def group(shift: float) -> dict:
        return {"p10": shift, "p90": shift, "rows": 40, "families": 4,
                "quantiles": [shift] * 19}

    cell = {"median_ape": 0.1, "rows": 40}
    provider = {"overall": cell, "cells": {}, "intervals": {
        "pick|throughput": group(0.0), "runner|throughput": group(math.log(2.0))}}
    path = tmp_path / "bands.json"
    path.write_text(json.dumps({"schema_version": 3, "method": "m", "csv_sha256": "x",
                                "overall": cell, "cells": {},
                                "providers": {"measured": provider}}))
    pick = _contender("a", 12.0, basis="pick|throughput")
    runner = _contender("b", 10.0, basis="runner|throughput")
    assert confidence(pick, runner, "goodput", 200.0, seed=0, bands_file=path) == 0.0
    assert confidence(runner, pick, "goodput", 200.0, seed=0, bands_file=path) == 1.0


def test_the_decision_states_its_confidence_against_the_other_engine():
    sglang = _contender("sglang", 12.0, engine="sglang")
    sglang_too = _contender("sglang b", 11.9, engine="sglang")
    vllm = _contender("vllm", 10.0)
    _, decision = decide([sglang, sglang_too, vllm], "goodput", 200.0, seed=1)
    assert decision.runner_up == "vllm"  # the first other engine, not the same engine's next
    assert decision.confidence is not None and 0.5 < decision.confidence < 1.0
    assert f"P(it beats vllm once the error is drawn) = {decision.confidence:.0%}" in (
        decision.text)


def test_when_nothing_is_feasible_the_score_orders_and_the_decision_says_so():
    a, b = _contender("a", 0.0, feasible=False), _contender("b", 0.0, feasible=False)
    b = Contender(replace(b.evaluation, score=2.0), "b", b.boundary)
    ordered, decision = decide([a, b], "goodput", 200.0)
    assert [c.label for c in ordered] == ["b", "a"]
    assert (decision.rule, decision.confidence, decision.tied_with) == ("infeasible", None, [])
    assert decision.text.startswith("no configuration searched keeps up")
    assert "falls behind" in decision.text and "not a configuration to deploy" in decision.text


def test_the_cost_objective_ranks_by_output_tokens_per_gpu_hour_at_the_boundary():
    # 10 req/s on 2 GPUs against 6 req/s on 1: per GPU 5 against 6; 200 output tokens a
    # request: 6 x 200 x 3600 / 1e6 = 4.32 Mtok per GPU-hour
    two, one = _contender("two", 10.0, gpus=2), _contender("one", 6.0)
    ordered, decision = decide([two, one], "cost", 200.0)
    assert decision.figures == pytest.approx({"two": 3.6, "one": 4.32})
    assert ordered[0].label == "one"
