"""Tests for recommender/perf.py: the step roofline and fixed-length steady state.

Expected figures come from first principles (published shapes and GPU peaks), not from the
module's own helpers; parameters are set explicitly so the tests do not depend on the fit.
"""

from __future__ import annotations

import itertools

import pytest

from core.errors import UsageError
from core.load import fixed
from engines.config import EngineConfig
from recommender.catalog import get_gpu, get_model
from recommender.perf import (
    Batch,
    EngineParams,
    PerfParams,
    default_params,
    deployment,
    moe_dense_share,
    predict,
    step_time,
)
from tests.recommender.deploy import deploy

PARAMS = EngineParams(
    compute_efficiency=0.5, bandwidth_efficiency=0.8, step_overhead_s=0.001,
    per_seq_overhead_s=0.0,
)
ALL = PerfParams(engines={"vllm": PARAMS, "sglang": PARAMS, "trtllm": PARAMS})


def _dep(model: str = "llama-3.1-8b", gpu: str = "H100-SXM", tp: int = 1, **kw):
    """A deployment whose kernel time is the roofline's (what this module's formulas check)."""
    config = EngineConfig(engine="vllm", model=model, tp=tp, **kw)
    return deployment(config, get_gpu(gpu), get_model(model), step_time="roofline")


def test_decode_batch1_is_weights_over_bandwidth_plus_overhead():
    # Llama-3.1-8B bf16: 8.03e9 params x 2 B = 16.06 GB read once per step (embedding and
    # lm_head stay bf16 too). H100-SXM 3.35 TB/s x 0.8 → 5.99 ms; + 1 ms overhead. Compute
    # (2 x ~7e9 FLOP over 989 TFLOP/s x 0.5 ≈ 28 µs) and one token of KV are negligible.
    expected = 8.03e9 * 2 / (3.35e12 * 0.8) + 0.001
    got = step_time(_dep(), Batch(prefill_tokens=0, decode_seqs=1, decode_context=1), PARAMS)
    assert got == pytest.approx(expected, rel=0.01)


def test_prefill_is_compute_bound():
    # 8192 prompt tokens: 2 x 7e9 x 8192 ≈ 1.1e14 FLOP ≫ what 16 GB of weights cost.
    dep = _dep()
    t = step_time(dep, Batch(8192, 0, 0, prefill_context=4096, prefill_seqs=1), PARAMS)
    weights_only = 8.03e9 * 2 / (3.35e12 * 0.8)
    assert t > 5 * weights_only


def test_tp_shrinks_per_gpu_weights_and_decode_step():
    one, two = _dep(model="llama-3.1-70b"), _dep(model="llama-3.1-70b", tp=4)
    assert two.weights_bytes_per_gpu == pytest.approx(one.weights_bytes_per_gpu / 4, rel=1e-6)
    batch = Batch(prefill_tokens=0, decode_seqs=8, decode_context=1000)
    assert step_time(two, batch, PARAMS) < step_time(one, batch, PARAMS)


def test_throughput_rises_and_tpot_rises_with_concurrency_below_knee():
    m, g = get_model("llama-3.1-8b"), get_gpu("H100-SXM")
    preds = [predict(deploy("vllm", m), m, g, fixed(1000, 1000, concurrency=c), params=ALL)
             for c in (1, 2, 4, 8, 16, 32, 64, 128)]
    tput = [p.output_throughput_tok_s for p in preds]
    tpot = [p.tpot_s for p in preds]
    assert all(b > a for a, b in itertools.pairwise(tput))
    assert all(b >= a for a, b in itertools.pairwise(tpot))
    # Below the knee throughput grows much faster than latency (DESIGN §4.5).
    assert tput[-1] / tput[0] > 5 * (tpot[-1] / tpot[0])


def test_fp8_kv_doubles_offline_batch_when_kv_bound():
    m, g = get_model("llama-3.1-70b"), get_gpu("H100-SXM")
    load = fixed(8000, 2000, offline=True, num_requests=20000)
    bf16 = predict(deploy("vllm", m, tp=4, max_num_seqs=4000, kv_cache_dtype="auto"), m, g,
                   load, params=ALL)
    fp8 = predict(deploy("vllm", m, tp=4, max_num_seqs=4000, kv_cache_dtype="fp8"), m, g,
                  load, params=ALL)
    assert bf16.batch_limit == fp8.batch_limit == "kv_capacity"
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, rel=0.001)
    assert fp8.batch == pytest.approx(2 * bf16.batch, rel=0.01)
    assert fp8.output_throughput_tok_s > 1.2 * bf16.output_throughput_tok_s


def test_more_gpus_as_replicas_double_throughput():
    m, g = get_model("llama-3.1-8b"), get_gpu("H100-SXM")
    cfg = deploy("trtllm", m)
    one = predict(cfg, m, g, fixed(500, 500, offline=True, num_requests=4000), params=ALL)
    two = predict(cfg, m, g, fixed(500, 500, offline=True, num_requests=8000), gpus=2,
                  params=ALL)
    assert two.output_throughput_tok_s == pytest.approx(2 * one.output_throughput_tok_s)


def test_closed_loop_above_ceiling_queues():
    m, g = get_model("llama-3.1-8b"), get_gpu("H100-SXM")
    cfg = deploy("vllm", m, max_num_seqs=64)
    at = predict(cfg, m, g, fixed(1000, 1000, concurrency=64), params=ALL)
    over = predict(cfg, m, g, fixed(1000, 1000, concurrency=128), params=ALL)
    assert over.batch == at.batch == 64
    assert over.output_throughput_tok_s == pytest.approx(at.output_throughput_tok_s)
    assert over.ttft_s > at.ttft_s + 0.5 * at.e2e_s


def test_latency_identities():
    m, g = get_model("qwen3-8b"), get_gpu("H100-SXM")
    p = predict(deploy("sglang", m), m, g, fixed(200, 300, concurrency=4),
                params=default_params())
    assert p.itl_s == p.tpot_s == p.step_time_s
    assert p.e2e_s == pytest.approx(p.ttft_s + 299 * p.tpot_s)
    assert p.total_throughput_tok_s == pytest.approx(p.request_throughput_rps * 500)


M8, H100 = get_model("llama-3.1-8b"), get_gpu("H100-SXM")


@pytest.mark.parametrize(
    "call",
    [
        lambda: predict(deploy("vllm", M8), M8, H100, fixed(100, 100, rate_rps=2.0)),
        lambda: predict(deploy("vllm", M8, tp=2), M8, H100, fixed(100, 100, concurrency=4),
                        gpus=3),
        lambda: deploy("vllm", M8, precision="fp3"),
    ],
)
def test_bad_inputs_raise_usage_error(call):
    with pytest.raises(UsageError):
        call()


@pytest.mark.parametrize("kw", [dict(), dict(concurrency=4, isl=0),
                                dict(concurrency=4, rate_rps=1.0)])
def test_a_load_without_exactly_one_arrival_or_with_bad_lengths_is_refused(kw):
    args = dict(isl=100, osl=100) | kw
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        fixed(args.pop("isl"), args.pop("osl"), **args)


def test_model_that_does_not_fit_raises():
    m = get_model("llama-3.1-405b")
    with pytest.raises(UsageError):
        predict(deploy("vllm", m), m, H100, fixed(10, 10, concurrency=1))


@pytest.mark.parametrize(("name", "dense"), [
    # (active/total − k/E) / (1 − k/E), by hand from the model cards' counts:
    ("gpt-oss-120b", (5.1 / 116.8 - 4 / 128) / (1 - 4 / 128)),  # 0.0128
    ("Qwen3-235B-A22B", (22 / 235 - 8 / 128) / (1 - 8 / 128)),  # 0.0332
    ("llama-3.1-8b", 1.0),
])
def test_moe_dense_share_counts_the_routed_experts_once(name, dense):
    """At one token a MoE step reads the dense part plus k of E experts: exactly the active
    weights (active/total of the body), not active/total plus k/E of the rest."""
    model = get_model(name)
    assert moe_dense_share(model) == pytest.approx(dense, rel=1e-9)
    if model.is_moe:
        k_over_e = model.experts_per_token / model.num_experts
        one_token = dense + (1 - dense) * k_over_e
        assert one_token == pytest.approx(model.active_params_b / model.total_params_b)
