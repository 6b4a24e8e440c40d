"""Tests for recommender/decision/scoring.py: the predicted figures it hands on, and how a latency
with no value ranks."""

from __future__ import annotations

import numpy as np
import pytest

from core.figures import EMPTY, Latency
from engines.config import EngineConfig, SpeculativeConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.goals import Goals, Target
from recommender.decision.recommendation import PredictedMetrics
from recommender.decision.scoring import evaluate, latency_s, predicted_metrics
from recommender.sim.simulator import SimOptions, SimRequests, simulate

GPU, MODEL = get_gpu("H100-SXM"), get_model("llama-3.1-8b")


def test_predicted_itl_is_the_simulators_pooled_itl_not_tpot():
    # With speculation at a = 0.5 (pinned: the premise, not the method's default) a step emits
    # ~1.9 tokens at once: one gap per step, so the pooled ITL is about a step while TPOT is
    # about a step over the tokens per step.
    spec = SpeculativeConfig(method="ngram", num_tokens=4)
    cfg = EngineConfig(engine="vllm", model=MODEL.name, speculative=spec)
    n = 20
    req = SimRequests(np.zeros(n), np.full(n, 300), np.full(n, 200))
    result = simulate(req, cfg, GPU, MODEL,
                      options=SimOptions(arrival="offline", spec_acceptance=0.5))
    got = predicted_metrics(result, 3, Goals("goodput", None, None))
    assert got.itl_s == result.summary.itl_s
    # At most one gap per token after the first, and fewer: steps emit several tokens.
    assert 0 < got.itl_s.count < n * 199
    assert got.itl_s.p50 > 1.5 * got.tpot_s.p50
    assert got.output_throughput_tok_s == pytest.approx(
        3 * result.summary.output_throughput_tok_s)


def _metrics(ttft: Latency, tpot: Latency) -> PredictedMetrics:
    return PredictedMetrics(ttft_s=ttft, tpot_s=tpot, itl_s=tpot, e2e_s=ttft,
                            output_throughput_tok_s=0.0, total_throughput_tok_s=0.0,
                            request_throughput_rps=0.0, kv_headroom_fraction=1.0,
                            slo_met=False)


def test_a_latency_without_value_ranks_worst():
    served = _metrics(Latency(count=1, mean=30.0, p50=30.0, p90=30.0, p95=30.0, p99=30.0),
                      Latency(count=1, mean=2.0, p50=2.0, p90=2.0, p95=2.0, p99=2.0))
    unserved = _metrics(EMPTY, EMPTY)
    # 30 s + 99 x 2 s = 228 s for a very slow but served candidate.
    assert latency_s(served, 100.0) == pytest.approx(228.0)
    assert latency_s(unserved, 100.0) > 1e6 * latency_s(served, 100.0)


def _target():
    from recommender.catalog.facts import hardware_facts, model_facts
    from recommender.model.params import load_params

    return Target(GPU, MODEL, 1, hardware_facts(GPU, 1), model_facts(MODEL), load_params())


def _evaluate(n: int, rate_rps: float):
    arrivals = np.arange(n) / rate_rps
    req = SimRequests(arrivals, np.full(n, 1000), np.full(n, 300))
    cfg = EngineConfig(engine="vllm", model=MODEL.name)
    return evaluate(cfg, req, 1, _target(), Goals("goodput", None, None))


def test_a_few_requests_well_below_capacity_keep_up():
    # 10 requests over 9 s on one H100 (each ~1-2 s alone): the last is served after the
    # span ends, which completions over the makespan alone read as falling behind.
    ev = _evaluate(10, 1.0)
    assert ev.predicted.request_throughput_rps < 0.95 * ev.offered_rps  # the tail's dilution
    assert ev.feasible, ev.rejected_reason


def test_a_queue_that_grows_falls_behind():
    # 400 requests at 100 req/s of 1000 + 300 tokens: far beyond what one H100 serves.
    ev = _evaluate(400, 100.0)
    assert not ev.feasible and ev.rejected_reason.startswith("falls behind")
