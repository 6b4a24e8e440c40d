"""The step-time model: what one engine iteration on one replica costs, as one named record.

Owns `Deployment` (the shapes and hardware peaks one step is priced with), `deployment`
(building it: memory plan, speculative draft, step-time provider), `StepCoefficients` (the
step formula's constants, named, with the engine's fitted parameters folded in) and
`step_seconds` (evaluating that record for one batch). The formula itself is written once,
in `recommender.sim.kernel.step_time` (`step_seconds` / `measured_step_seconds`, compiled;
`priced_step` picks one by the table): the simulator's loop and every Python caller (the
steady-state algebra, the fit, benches) evaluate the same record through it. No I/O; no simulation.

The formula, per DP rank, per step (decode tokens = decode_seqs · q, q = k + 1 with
speculative decoding, else 1; tokens = prefill tokens + decode tokens):
- compute = [2·(active params − embeddings)·tokens + 2·V·H·sampled + attention] / tp
  / (peak FLOP/s of the compute dtype × compute_efficiency),
  attention = 4·layers·heads·head_dim·(decode tokens·decode context + prefill causal context);
- memory = [dense weights per GPU + expert weights per GPU × share of experts touched by
  tokens·dp (every DP rank's tokens reach the experts) + KV read and written] / (HBM × bw_eff);
- kernel = (compute^p + memory^p)^(1/p) + TP all-reduces (2 per layer, ring traffic over the
  one-way link) + EP all-to-all (dispatch and combine of each token's hidden state to its k
  experts per MoE layer), each with a fixed latency; or, with a measured provider, its
  table's kernel time for the same batch (`steptime`);
- total = kernel + step_overhead + per_seq_overhead·sampled + the speculative draft.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from core.errors import UsageError
from engines.config import EngineConfig, WeightQuantization
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.memory import MemoryPlan, plan_memory
from recommender.model.params import EngineParams, GpuScales
from recommender.model.speculative import SpecDraft, draft_for
from recommender.model.steptime import DEFAULT_KIND, KernelModel, StepCell, kernels_for
from recommender.sim.kernel import step_time as kernel_step_time
from recommender.sim.kernel.coefficients import COEF_FIELDS
from recommender.sim.kernel.freshness import ensure_fresh
from recommender.sim.kernel.spec_coefficients import SPEC_Q

# The roofline blend: (compute^p + memory^p)^(1/p). p = 4 stays within 19 % of max() at the
# ridge point (where compute = memory) and within 1 % once one side is 2x the other, and is
# smooth, which least_squares needs. p → ∞ is the hard max().
ROOFLINE_P = 4.0
ACTIVATION_BYTES = 2  # bf16 activations in the TP all-reduce and the EP all-to-all
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP (Megatron-style TP)
ALLTOALLS_PER_MOE_LAYER = 2  # dispatch to the experts' GPUs, combine back

# Precision names `predict` accepts → EngineConfig.weight_quantization.
PRECISIONS: dict[str, WeightQuantization] = {
    "bf16": "none", "fp16": "none", "fp8": "fp8", "int8": "int8", "int4": "int4",
    "awq": "awq", "gptq": "gptq", "nvfp4": "nvfp4", "mxfp4": "mxfp4",
}


@dataclass(slots=True, frozen=True)
class Batch:
    """One engine step of one DP rank: prefill tokens (chunks of prompts) and decodes."""

    prefill_tokens: float
    decode_seqs: float
    decode_context: float  # mean tokens already cached per decode sequence
    prefill_context: float = 0.0  # mean causal context seen by a prefill token
    prefill_seqs: float = 0.0  # prompts whose last token is sampled this step


@dataclass(slots=True, frozen=True)
class Deployment:
    """What one step is priced with: the model on a TP group (× dp attention ranks, ep
    expert ranks) of `gpu`, per-GPU bytes and peaks (built by `deployment`)."""

    model: ModelSpec
    gpu: GPU
    tp: int
    weights_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int
    peak_flops: float  # per GPU, FLOP/s, in the compute dtype
    bandwidth_bytes_s: float
    link_bytes_s: float  # one-way GPU-GPU bandwidth per GPU
    spec: SpecDraft | None = None  # speculative decoding's draft, None = plain decoding
    kernels: KernelModel | None = None  # step-time provider; None = the roofline
    expert_bytes_per_gpu: float = 0.0  # routed experts among weights_bytes_per_gpu
    dp: int = 1  # attention data-parallel ranks whose tokens meet in the MoE layers
    ep: int = 1  # expert-parallel size (1: experts tensor-sharded over tp)


@dataclass(slots=True, frozen=True)
class RooflineKernels:
    """The roofline provider: the closed form of `kernel_step_time.step_seconds`; every cell."""

    kind: str = "roofline"

    def table(self) -> np.ndarray:
        """Empty: the roofline is evaluated from the coefficients alone."""
        return np.zeros(0)


ROOFLINE = RooflineKernels()


def roofline_kernels(cell: StepCell) -> RooflineKernels:
    """Provider factory of kind "roofline" (`steptime.PROVIDERS`): every cell."""
    del cell  # the roofline covers every cell
    return ROOFLINE


def _peak_flops(gpu: GPU, weight_format: str) -> float:
    """Dense FLOP/s of the matmul dtype: FP8/FP4/INT8 only where the GPU runs it natively;
    4-bit group formats (int4/awq/gptq) and weight-only FP8 on older GPUs dequantize to bf16.
    """
    table = {
        "fp8": gpu.fp8_dense_tflops,
        "int8": gpu.int8_dense_tops,
        "nvfp4": gpu.fp4_dense_tflops,
        "mxfp4": gpu.fp4_dense_tflops,
    }
    native = table.get(weight_format)
    return (native or gpu.bf16_dense_tflops) * 1e12


def deployment(
    config: EngineConfig, gpu: GPU, model: ModelSpec, *, acceptance: float | None = None,
    scales: GpuScales | None = None, step_time: str = DEFAULT_KIND,
    plan: MemoryPlan | None = None,
) -> Deployment:
    """Shapes, memory plan and hardware peaks for `config` on its GPU group of `gpu`.

    `acceptance` overrides the speculative method's default per-token acceptance rate;
    `scales` corrects the GPU's peaks (PerfParams.scales, fitted per architecture);
    `step_time` names the step-time provider (`steptime.PROVIDERS`), the roofline where it
    does not cover the cell; `plan` is `config`'s memory plan when the caller has it
    (`recommender.model.resolve`), else it is made here.
    """
    scales = scales or GpuScales()
    plan = plan or plan_memory(config, gpu, model)
    spec = None
    if config.speculative is not None:
        spec = draft_for(config.speculative, model, acceptance)
    kv_format = "fp8" if plan.kv_dtype_bytes == 1 else "bf16"
    cell = StepCell(engine=config.engine, gpu=gpu, model=model, tp=config.tp,
                    weights_format=plan.weights_format, kv_cache_dtype=kv_format,
                    dp=config.dp, ep=config.ep)
    return Deployment(
        model=model, gpu=gpu, tp=config.tp,
        weights_bytes_per_gpu=plan.weights_bytes_per_gpu,
        kv_bytes_per_token_per_gpu=plan.kv_bytes_per_token_per_gpu,
        kv_capacity_tokens=plan.kv_capacity_tokens,
        peak_flops=_peak_flops(gpu, plan.weights_format) * scales.compute_scale,
        bandwidth_bytes_s=gpu.mem_bandwidth_tb_s * 1e12 * scales.bandwidth_scale,
        link_bytes_s=gpu.interconnect_bandwidth_gb_s * 1e9 / 2,
        spec=spec, kernels=kernels_for(cell, step_time),
        expert_bytes_per_gpu=plan.expert_weights_bytes_per_gpu, dp=config.dp, ep=config.ep,
    )


@dataclass(slots=True, frozen=True)
class StepCoefficients:
    """The step formula's constants for one deployment and engine parameters (seconds per
    unit); field order is `kernel.coefficients.COEF_FIELDS`, the layout the kernel reads."""

    dense_flop_s: float  # per token: the linear layers (active params)
    sample_flop_s: float  # per sampled position: the lm_head
    attn_flop_s: float  # per token of attended context
    dense_weight_s: float  # the weights every step reads (dense part, per GPU)
    expert_weight_s: float  # routed experts on this GPU, read where touched
    kv_byte_s: float  # per KV token read or written
    expert_keep: float  # 1 − k/E: the chance one token misses a given expert
    expert_token_scale: float  # tokens reaching the experts per rank token (dp)
    comm_token_s: float  # TP all-reduce traffic per token
    comm_fixed_s: float  # TP all-reduce latencies per step
    a2a_token_s: float  # EP dispatch + combine traffic per token
    a2a_fixed_s: float  # EP all-to-all latencies per step
    step_overhead_s: float
    seq_overhead_s: float  # per sampled position
    roofline_p: float
    spec_queries: float  # query tokens per decode: k + 1 (1 without speculation)
    draft_forwards: float  # k
    draft_flop_s: float  # per decode sequence per draft forward
    draft_weight_s: float
    draft_kv_s: float  # per decode context token
    draft_fixed_s: float  # per draft forward
    draft_cpu_s: float  # per decode sequence (ngram proposer)
    spec_tokens_per_step: float  # expected tokens per decode step
    closed_loop_reentry_s: float  # engine finish to the same user's next entry (gap + API)
    prefill_scale: float  # measured tables: the release's prefill GEMM time over the table's

    def array(self) -> np.ndarray:
        """The record as the kernel's float64 array (`COEF_FIELDS` order)."""
        # getattr, not dataclasses.asdict: asdict deep-copies, and the fit prices every row
        # per residual (it was a third of a steady-state evaluation)
        return np.array([getattr(self, name) for name in COEF_FIELDS],
                        dtype=np.float64)


def _comm(dep: Deployment, params: EngineParams) -> tuple[float, float, float, float]:
    """(TP all-reduce s per token, per step; EP all-to-all s per token, per step)."""
    m = dep.model
    link = dep.link_bytes_s * params.interconnect_efficiency
    ar_tok = ar_fix = a2a_tok = a2a_fix = 0.0
    if dep.tp > 1:
        ring = 2.0 * (dep.tp - 1) / dep.tp * m.hidden_size * ACTIVATION_BYTES
        ar_tok = ALLREDUCES_PER_LAYER * m.num_layers * ring / link
        ar_fix = ALLREDUCES_PER_LAYER * m.num_layers * params.allreduce_latency_s
    if dep.ep > 1 and m.is_moe:
        moe_layers = m.num_layers - m.num_dense_layers
        # Each of a GPU's tokens (a rank's tokens over its tp GPUs) goes to k experts, a share
        # (ep − 1)/ep of them on other GPUs, and comes back.
        sent = (m.experts_per_token or 1) * m.hidden_size * ACTIVATION_BYTES \
            * (dep.ep - 1) / dep.ep / dep.tp
        a2a_tok = ALLTOALLS_PER_MOE_LAYER * moe_layers * sent / link
        a2a_fix = ALLTOALLS_PER_MOE_LAYER * moe_layers * params.allreduce_latency_s
    return ar_tok, ar_fix, a2a_tok, a2a_fix


def _draft(dep: Deployment, params: EngineParams, flops_s: float, bytes_s: float
           ) -> dict[str, float]:
    spec = dep.spec
    if spec is None:
        return {"spec_queries": 1.0, "draft_forwards": 0.0, "draft_flop_s": 0.0,
                "draft_weight_s": 0.0, "draft_kv_s": 0.0, "draft_fixed_s": 0.0,
                "draft_cpu_s": 0.0, "spec_tokens_per_step": 1.0}
    return {"spec_queries": spec.k + 1.0, "draft_forwards": float(spec.k),
            "draft_flop_s": 2.0 * spec.draft_params / flops_s,
            "draft_weight_s": spec.draft_weights_bytes / dep.tp / bytes_s,
            "draft_kv_s": spec.draft_kv_bytes_per_token / dep.tp / bytes_s,
            "draft_fixed_s": spec.overhead_share * params.step_overhead_s,
            "draft_cpu_s": spec.cpu_s_per_seq, "spec_tokens_per_step": spec.tokens_per_step}


def step_coefficients(dep: Deployment, params: EngineParams) -> StepCoefficients:
    """The step formula's constants for `dep` under the engine's fitted `params`."""
    m = dep.model
    vocab_matrix = m.vocab_size * m.hidden_size
    heads = 1 if m.tie_word_embeddings else 2
    linear_params = max(m.active_params_b * 1e9 - heads * vocab_matrix, 0.0)
    flops_s = dep.tp * dep.peak_flops * params.compute_efficiency
    bytes_s = dep.bandwidth_bytes_s * params.bandwidth_efficiency
    expert_bytes = dep.expert_bytes_per_gpu
    dense_bytes = dep.weights_bytes_per_gpu - expert_bytes
    keep = 1.0 - (m.experts_per_token or 1) / (m.num_experts or 1) if m.is_moe else 0.0
    ar_tok, ar_fix, a2a_tok, a2a_fix = _comm(dep, params)
    return StepCoefficients(
        dense_flop_s=2.0 * linear_params / flops_s,
        sample_flop_s=2.0 * vocab_matrix / flops_s,
        attn_flop_s=4.0 * m.num_layers * m.num_attention_heads * m.head_dim / flops_s,
        dense_weight_s=dense_bytes / bytes_s, expert_weight_s=expert_bytes / bytes_s,
        kv_byte_s=dep.kv_bytes_per_token_per_gpu / bytes_s,
        expert_keep=keep, expert_token_scale=float(dep.dp),
        comm_token_s=ar_tok, comm_fixed_s=ar_fix, a2a_token_s=a2a_tok, a2a_fixed_s=a2a_fix,
        step_overhead_s=params.step_overhead_s, seq_overhead_s=params.per_seq_overhead_s,
        roofline_p=ROOFLINE_P, **_draft(dep, params, flops_s, bytes_s),
        closed_loop_reentry_s=params.closed_loop_gap_s + params.request_overhead_s,
        prefill_scale=params.prefill_scale(dep.tp),
    )


def step_seconds(coefficients: StepCoefficients | np.ndarray, table: np.ndarray,
                 batch: Batch) -> float:
    """Seconds one step of `batch` takes: the kernel's formula over the record (`table`: a
    measured provider's kernel table, empty for the roofline).

    Raises:
        UsageError: negative batch figures, or an empty batch.
    """
    coef = coefficients.array() if isinstance(coefficients, StepCoefficients) else coefficients
    q = coef[SPEC_Q]
    if min(batch.prefill_tokens, batch.decode_seqs, batch.decode_context) < 0 or (
            batch.prefill_tokens + batch.decode_seqs * q <= 0):
        raise UsageError(f"step needs a non-empty, non-negative batch, got {batch}")
    sums = (float(batch.prefill_tokens), float(batch.decode_seqs),
            float(batch.decode_seqs * batch.decode_context),
            float(batch.prefill_tokens * batch.prefill_context), float(batch.prefill_seqs))
    ensure_fresh()  # before the process's first kernel call
    return float(kernel_step_time.priced_step(coef, table, *sums))


def weight_quantization(precision: str) -> WeightQuantization:
    """`EngineConfig.weight_quantization` of a precision name (`PRECISIONS`).

    Raises:
        UsageError: an unknown precision name.
    """
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


assert tuple(f.name for f in fields(StepCoefficients)) == COEF_FIELDS

__all__ = ["ACTIVATION_BYTES", "PRECISIONS", "ROOFLINE", "ROOFLINE_P", "Batch", "Deployment",
           "RooflineKernels", "StepCoefficients", "deployment", "roofline_kernels",
           "step_coefficients", "step_seconds", "weight_quantization"]
