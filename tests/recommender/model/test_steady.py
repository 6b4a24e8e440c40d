"""Tests for recommender/model/steady.py: the fixed-length steady state of a resolved deployment.

Expected figures are DESIGN §4's regularities and the closed form's own identities;
parameters are set explicitly so the tests do not depend on the fit.
"""

from __future__ import annotations

import itertools

import pytest

from core.errors import UsageError
from core.load import fixed
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.params import EngineParams, PerfParams, default_params
from recommender.model.resolve import resolve
from recommender.model.steady import steady_state
from tests.recommender.deploy import deploy, steady

PARAMS = EngineParams(
    compute_efficiency=0.5, bandwidth_efficiency=0.8, step_overhead_s=0.001,
    per_seq_overhead_s=0.0,
)
ALL = PerfParams(engines={"vllm": PARAMS, "sglang": PARAMS, "trtllm": PARAMS})
M8, H100 = get_model("llama-3.1-8b"), get_gpu("H100-SXM")


def test_throughput_rises_and_tpot_rises_with_concurrency_below_knee():
    preds = [steady(deploy("vllm", M8), M8, H100, fixed(1000, 1000, concurrency=c), params=ALL)
             for c in (1, 2, 4, 8, 16, 32, 64, 128)]
    tput = [p.output_throughput_tok_s for p in preds]
    tpot = [p.tpot_s for p in preds]
    assert all(b > a for a, b in itertools.pairwise(tput))
    assert all(b >= a for a, b in itertools.pairwise(tpot))
    # Below the knee throughput grows much faster than latency (DESIGN §4.5).
    assert tput[-1] / tput[0] > 5 * (tpot[-1] / tpot[0])


def test_fp8_kv_doubles_offline_batch_when_kv_bound():
    m = get_model("llama-3.1-70b")
    load = fixed(8000, 2000, offline=True, num_requests=20000)
    bf16 = steady(deploy("vllm", m, tp=4, max_num_seqs=4000, kv_cache_dtype="auto"), m, H100,
                  load, params=ALL)
    fp8 = steady(deploy("vllm", m, tp=4, max_num_seqs=4000, kv_cache_dtype="fp8"), m, H100,
                 load, params=ALL)
    assert bf16.batch_limit == fp8.batch_limit == "kv_capacity"
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, rel=0.001)
    assert 2 * bf16.batch <= fp8.batch <= 2 * bf16.batch + 1  # whole sequences each
    assert fp8.output_throughput_tok_s > 1.2 * bf16.output_throughput_tok_s


def test_more_gpus_as_replicas_double_throughput():
    cfg = deploy("trtllm", M8)
    one = steady(cfg, M8, H100, fixed(500, 500, offline=True, num_requests=4000), params=ALL)
    two = steady(cfg, M8, H100, fixed(500, 500, offline=True, num_requests=8000), gpus=2,
                 params=ALL)
    assert two.replicas == 2 * one.replicas == 2
    assert two.output_throughput_tok_s == pytest.approx(2 * one.output_throughput_tok_s)


def test_closed_loop_above_ceiling_queues():
    cfg = deploy("vllm", M8, max_num_seqs=64)
    at = steady(cfg, M8, H100, fixed(1000, 1000, concurrency=64), params=ALL)
    over = steady(cfg, M8, H100, fixed(1000, 1000, concurrency=128), params=ALL)
    assert over.batch == at.batch == 64
    assert over.output_throughput_tok_s == pytest.approx(at.output_throughput_tok_s)
    assert over.ttft_s > at.ttft_s + 0.5 * at.e2e_s


def test_latency_identities():
    m = get_model("qwen3-8b")
    p = steady(deploy("sglang", m), m, H100, fixed(200, 300, concurrency=4),
               params=default_params())
    assert p.itl_s == p.tpot_s == p.step_time_s
    assert p.e2e_s == pytest.approx(p.ttft_s + 299 * p.tpot_s)
    assert p.total_throughput_tok_s == pytest.approx(p.request_throughput_rps * 500)


def test_the_closed_loop_gap_lengthens_a_users_cycle_not_its_latencies():
    # 4 users within the batch: each user's cycle (users / request rate, Little's law) grows
    # by exactly the client's gap G, while TTFT, TPOT and E2E stay put.
    g_s = 0.25
    gapped = PARAMS.model_copy(update={"closed_loop_gap_s": g_s})
    load = fixed(300, 200, concurrency=4)
    base = steady(deploy("vllm", M8), M8, H100, load, params=ALL)
    spaced = steady(deploy("vllm", M8), M8, H100, load,
                    params=PerfParams(engines={"vllm": gapped}))
    assert spaced.ttft_s == base.ttft_s and spaced.tpot_s == base.tpot_s
    assert spaced.e2e_s == base.e2e_s
    cycle = 4 / base.request_throughput_rps
    assert cycle == pytest.approx(base.e2e_s, rel=0.01)
    assert 4 / spaced.request_throughput_rps == pytest.approx(cycle + g_s, rel=1e-9)


def test_a_trtllm_request_holds_its_whole_output_resident():
    # GUARANTEED_NO_EVICT (recommender.sim.policies): the KV-bound batch counts isl + osl tokens
    # a request, where vLLM's blocks grow as it decodes (isl + osl/2 on average).
    load = fixed(2000, 2000, offline=True, num_requests=20000)
    got = {}
    for engine in ("vllm", "trtllm"):
        res = resolve(deploy(engine, M8, max_num_seqs=4000), H100, M8, ALL,
                      longest_tokens=4000)
        pred = steady_state(res, load)
        assert pred.batch_limit == "kv_capacity"
        got[engine] = pred.batch * {"vllm": 3000, "trtllm": 4000}[engine] / (
            res.step.kv_capacity_tokens)
    assert got["vllm"] == pytest.approx(1.0, abs=0.01)
    assert got["trtllm"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize(
    "call",
    [
        lambda: deploy("vllm", M8, precision="fp3"),
    ],
)
def test_bad_inputs_raise_usage_error(call):
    with pytest.raises(UsageError):
        call()


def test_poisson_rate_below_the_ceiling_is_served_and_above_it_queues_half_the_run():
    """Open loop: below the offline ceiling μ every arrival is served (throughput = rate ×
    OSL) with TTFT near one prefill; above it a finite run of N requests queues, request k
    waiting k·(1/μ − 1/R), so the mean TTFT grows by N/2·(1/μ − 1/R)."""
    config = deploy("vllm", M8)
    mu = steady(config, M8, H100, fixed(1000, 200, offline=True, num_requests=10**6),
                params=ALL).request_throughput_rps
    low = steady(config, M8, H100, fixed(1000, 200, rate_rps=0.3 * mu), params=ALL)
    assert low.output_throughput_tok_s == pytest.approx(0.3 * mu * 200)
    single = steady(config, M8, H100, fixed(1000, 200, concurrency=1), params=ALL)
    assert single.ttft_s <= low.ttft_s < 2 * single.ttft_s
    n = 4000
    high = steady(config, M8, H100, fixed(1000, 200, rate_rps=2 * mu, num_requests=n),
                  params=ALL)
    assert high.request_throughput_rps == pytest.approx(mu, rel=1e-6)
    assert high.ttft_s == pytest.approx(n / 2 * (1 / mu - 1 / (2 * mu)), rel=0.05)


@pytest.mark.parametrize("kw", [dict(), dict(concurrency=4, isl=0),
                                dict(concurrency=4, rate_rps=1.0)])
def test_a_load_without_exactly_one_arrival_or_with_bad_lengths_is_refused(kw):
    args = dict(isl=100, osl=100) | kw
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        fixed(args.pop("isl"), args.pop("osl"), **args)


def test_model_that_does_not_fit_raises():
    m = get_model("llama-3.1-405b")
    with pytest.raises(UsageError):
        steady(deploy("vllm", m), m, H100, fixed(10, 10, concurrency=1))
