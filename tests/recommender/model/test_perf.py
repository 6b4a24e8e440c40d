"""Tests for recommender/model/perf.py: the step model (the deployment's shapes and peaks, the step
formula's coefficients and `step_seconds`).

Expected figures come from first principles (published shapes and GPU peaks), not from the
module's own helpers; parameters are set explicitly so the tests do not depend on the fit.
The steady-state algebra built on the step is tested in test_steady.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import UsageError
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.params import EngineParams
from recommender.model.perf import (
    Batch,
    Deployment,
    StepCoefficients,
    deployment,
    step_coefficients,
    step_seconds,
)
from recommender.sim.kernel.coefficients import COEF_FIELDS, N_COEF

PARAMS = EngineParams(
    compute_efficiency=0.5, bandwidth_efficiency=0.8, step_overhead_s=0.001,
    per_seq_overhead_s=0.0,
)


def _dep(model: str = "llama-3.1-8b", gpu: str = "H100-SXM", tp: int = 1, **kw) -> Deployment:
    """A deployment whose kernel time is the roofline's (what this module's formulas check)."""
    config = EngineConfig(engine="vllm", model=model, tp=tp, **kw)
    return deployment(config, get_gpu(gpu), get_model(model), step_time="roofline")


def _step(dep: Deployment, batch: Batch, params: EngineParams = PARAMS) -> float:
    table = dep.kernels.table() if dep.kernels is not None else np.zeros(0)
    return step_seconds(step_coefficients(dep, params), table, batch)


def test_decode_batch1_is_weights_over_bandwidth_plus_overhead():
    # Llama-3.1-8B bf16: 8.03e9 params x 2 B = 16.06 GB read once per step (embedding and
    # lm_head stay bf16 too). H100-SXM 3.35 TB/s x 0.8 → 5.99 ms; + 1 ms overhead. Compute
    # (2 x ~7e9 FLOP over 989 TFLOP/s x 0.5 ≈ 28 µs) and one token of KV are negligible.
    expected = 8.03e9 * 2 / (3.35e12 * 0.8) + 0.001
    got = _step(_dep(), Batch(prefill_tokens=0, decode_seqs=1, decode_context=1))
    assert got == pytest.approx(expected, rel=0.01)


def test_prefill_is_compute_bound():
    # 8192 prompt tokens: 2 x 7e9 x 8192 ≈ 1.1e14 FLOP ≫ what 16 GB of weights cost.
    t = _step(_dep(), Batch(8192, 0, 0, prefill_context=4096, prefill_seqs=1))
    weights_only = 8.03e9 * 2 / (3.35e12 * 0.8)
    assert t > 5 * weights_only


def test_tp_shrinks_per_gpu_weights_and_decode_step():
    one, two = _dep(model="llama-3.1-70b"), _dep(model="llama-3.1-70b", tp=4)
    assert two.weights_bytes_per_gpu == pytest.approx(one.weights_bytes_per_gpu / 4, rel=1e-6)
    batch = Batch(prefill_tokens=0, decode_seqs=8, decode_context=1000)
    assert _step(two, batch) < _step(one, batch)


@pytest.mark.parametrize("batch", [Batch(0, 0, 0), Batch(-1, 4, 100), Batch(10, -1, 100),
                                   Batch(0, 4, -5)])
def test_an_empty_or_negative_batch_is_a_usage_error(batch):
    with pytest.raises(UsageError, match="non-empty, non-negative batch"):
        _step(_dep(), batch)


def test_coefficients_are_the_kernels_layout():
    # The record is the array the compiled loop reads: one slot per named field, in order.
    coef = step_coefficients(_dep(), PARAMS)
    array = coef.array()
    assert isinstance(coef, StepCoefficients) and array.dtype == np.float64
    assert array.shape == (N_COEF,)
    for i, name in enumerate(COEF_FIELDS):
        assert array[i] == getattr(coef, name), name
    batch = Batch(300, 12, 900, prefill_context=150, prefill_seqs=1)
    assert step_seconds(array, np.zeros(0), batch) == step_seconds(coef, np.zeros(0), batch)


# ---------------------------------------------------------------------------------------------
# The roofline step, computed here from the published shapes and the datasheet peaks

H100_BF16_FLOPS = 989e12  # dense BF16, H100-SXM datasheet
H100_HBM_BYTES_S = 3.35e12  # HBM3
H100_LINK_BYTES_S = 900e9 / 2  # NVLink 4: 900 GB/s both ways, one way per GPU
COMM = EngineParams(compute_efficiency=0.55, bandwidth_efficiency=0.8, step_overhead_s=0.0015,
                    per_seq_overhead_s=3e-6, interconnect_efficiency=0.7,
                    allreduce_latency_s=12e-6)
# (prefill tokens, decode seqs, decode context, prefill context, prompts sampled)
BATCHES = np.array([
    (0, 1, 1, 0, 0), (0, 64, 3000, 0, 0), (512, 0, 0, 256, 1), (8192, 0, 0, 4096, 1),
    (2048, 96, 1500, 700, 3), (100, 7, 20000, 40, 1), (0, 512, 800, 0, 0),
], dtype=np.float64)


def _roofline_by_hand(name: str, tp: int, dp: int, ep: int) -> np.ndarray:
    """perf's module docstring, written out over the batches with numpy: bf16 weights (2 B a
    parameter, embeddings too), bf16 KV, the routed experts read where a token of any DP
    rank goes, TP all-reduces and EP all-to-alls over the one-way NVLink bandwidth."""
    m = get_model(name)
    pf, ds, ctx, pctx, ps = BATCHES.T
    tokens, sampled = pf + ds, ds + ps
    vocab = m.vocab_size * m.hidden_size  # untied: embedding and lm_head, each V x H
    assert not m.tie_word_embeddings
    flops = (2 * (m.active_params_b * 1e9 - 2 * vocab) * tokens + 2 * vocab * sampled
             + 4 * m.num_layers * m.num_attention_heads * m.head_dim * (ds * ctx + pf * pctx))
    compute = flops / tp / (H100_BF16_FLOPS * COMM.compute_efficiency)
    body = (m.total_params_b * 1e9 - 2 * vocab) * 2
    dense_bytes, expert_bytes, touched = body / tp, 0.0, 0.0
    if m.is_moe:
        # active = dense + (total − dense)·k/E of the body: the dense part every token reads
        k_e = m.experts_per_token / m.num_experts
        dense = (m.active_params_b / m.total_params_b - k_e) / (1 - k_e) * body
        dense_bytes, expert_bytes = dense / tp, (body - dense) / (tp * dp)
        touched = 1 - (1 - k_e) ** (tokens * dp)
    dense_bytes += 2 * vocab * 2 / tp
    kv_per_token = 2 * m.num_layers * (m.num_kv_heads // tp) * m.head_dim * 2  # K and V, bf16
    memory = (dense_bytes + expert_bytes * touched + kv_per_token * (ds * ctx + tokens)) / (
        H100_HBM_BYTES_S * COMM.bandwidth_efficiency)
    kernel = (compute**4 + memory**4) ** 0.25
    link = H100_LINK_BYTES_S * COMM.interconnect_efficiency
    if tp > 1:
        ring = 2 * (tp - 1) / tp * tokens * m.hidden_size * 2
        kernel += 2 * m.num_layers * (ring / link + COMM.allreduce_latency_s)
    if ep > 1:
        sent = m.experts_per_token * tokens / tp * m.hidden_size * 2 * (ep - 1) / ep
        kernel += 2 * m.num_layers * (sent / link + COMM.allreduce_latency_s)
    return kernel + COMM.step_overhead_s + COMM.per_seq_overhead_s * sampled


@pytest.mark.parametrize(("name", "tp", "dp", "ep"), [
    ("llama-3.1-8b", 1, 1, 1),
    ("llama-3.1-70b", 4, 1, 1),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, 1, 1),  # experts tensor-sharded over TP
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, 1, 2),  # TEP: experts over the TP group
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 1, 2, 2),  # DEP: attention DP, experts over both
])
def test_roofline_step_is_the_formula_from_shapes_and_peaks(name, tp, dp, ep):
    want = _roofline_by_hand(name, tp, dp, ep)
    dep = _dep(model=name, tp=tp, dp=dp, ep=ep)
    assert dep.kernels is not None and dep.kernels.kind == "roofline"
    coef = step_coefficients(dep, COMM)
    got = [step_seconds(coef, dep.kernels.table(),
                        Batch(pf, ds, ctx, prefill_context=pctx, prefill_seqs=ps))
           for pf, ds, ctx, pctx, ps in BATCHES]
    np.testing.assert_allclose(got, want, rtol=1e-9)


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
    assert model.dense_share() == pytest.approx(dense, rel=1e-9)
    if model.is_moe:
        k_over_e = model.experts_per_token / model.num_experts
        one_token = dense + (1 - dense) * k_over_e
        assert one_token == pytest.approx(model.active_params_b / model.total_params_b)
