"""The analytical performance model: one engine step's time and fixed-length steady state.

Owns `step_time` (one iteration on a TP group: the kernel time of the deployment's step-time
provider, `recommender.steptime`, plus the engine's fitted overheads and the speculative
draft), the roofline provider (`roofline_kernels`, the default and the fallback) and `predict`
(continuous-batching steady-state algebra for one fixed-length workload). Efficiencies and
overheads come from a fitted `PerfParams` record (`recommender.params`, re-exported here;
data/calibration/fit.json, written by `recommender.calibrate`). Memory comes from
`plan_memory`. No I/O; no simulation (the simulator builds on `step_time`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.errors import UsageError
from core.load import LoadSpec
from engines.config import EngineConfig, EngineKind, WeightQuantization
from recommender.memory import plan_memory, size_max_model_len
from recommender.params import (
    FIT_FILE,
    EngineParams,
    GpuScales,
    PerfParams,
    default_params,
    load_params,
)
from recommender.specs import GPU, ModelSpec
from recommender.speculative import SpecDraft, draft_for
from recommender.steptime import FALLBACK_KIND, KernelModel, StepCell, kernels_for

# The roofline blend: (compute^p + memory^p)^(1/p). p = 4 stays within 19 % of max() at the
# ridge point (where compute = memory) and within 1 % once one side is 2x the other, and is
# smooth, which least_squares needs. p → ∞ is the hard max().
ROOFLINE_P = 4.0
ACTIVATION_BYTES = 2  # bf16 activations in the TP all-reduce
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP (Megatron-style TP)

# Precision names `predict` accepts → EngineConfig.weight_quantization.
PRECISIONS: dict[str, WeightQuantization] = {
    "bf16": "none", "fp16": "none", "fp8": "fp8", "int8": "int8", "int4": "int4",
    "awq": "awq", "gptq": "gptq", "nvfp4": "nvfp4", "mxfp4": "mxfp4",
}

# Engine defaults the plug-ins leave GPU-dependent (engines/*.py `defaults.notes`):
# vLLM serve: 1024 seqs / 8192 tokens on >= 70 GiB non-A100 GPUs, else 256 / 2048.
# SGLang: running requests bounded by the KV pool (no fixed cap; 4096 stands for "none"),
# chunked-prefill-size 8192 on >= 70 GiB GPUs (16384 on B200/MI300), else 4096.
NO_CAP_SEQS = 4096


@dataclass(slots=True, frozen=True)
class Batch:
    """One engine step: prefill tokens (chunks of prompts) and decode sequences."""

    prefill_tokens: float
    decode_seqs: float
    decode_context: float  # mean tokens already cached per decode sequence
    prefill_context: float = 0.0  # mean causal context seen by a prefill token
    prefill_seqs: float = 0.0  # prompts whose last token is sampled this step


@dataclass(slots=True, frozen=True)
class Deployment:
    """What `step_time` needs about the model on the GPU group (built by `deployment`)."""

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


class RooflineKernels:
    """The roofline provider: compute vs HBM traffic of one forward, blended, + TP
    all-reduces (`step_time` documents the terms); the fitted efficiencies and the GPU
    family's scales apply. Covers every cell."""

    kind = "roofline"

    def kernel_seconds(self, dep: Deployment, batch: Batch, params: EngineParams) -> float:
        """Seconds of the forward's kernels (roofline + comm; no overheads, no draft)."""
        return _roofline_kernel_s(dep, batch, params)

    def table(self) -> np.ndarray:
        """Empty: the simulator evaluates the roofline in closed form (step_coefficients)."""
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
    scales: GpuScales | None = None, step_time: str | None = None,
) -> Deployment:
    """Shapes, memory plan and hardware peaks for `config` on a TP group of `gpu`.

    `acceptance` overrides the speculative method's default per-token acceptance rate;
    `scales` corrects the GPU's peaks (PerfParams.scales, fitted per architecture);
    `step_time` names the step-time provider (`steptime.PROVIDERS`; default the active one,
    `steptime.active_kind`), the roofline where it does not cover the cell.
    """
    scales = scales or GpuScales()
    plan = plan_memory(config, gpu, model)
    spec = None
    if config.speculative is not None:
        spec = draft_for(config.speculative, model, acceptance)
    kv_format = "fp8" if plan.kv_dtype_bytes == 1 else "bf16"
    cell = StepCell(engine=config.engine, gpu=gpu, model=model, tp=config.tp,
                    weights_format=plan.weights_format, kv_cache_dtype=kv_format)
    return Deployment(
        model=model,
        gpu=gpu,
        tp=config.tp,
        weights_bytes_per_gpu=plan.weights_bytes_per_gpu,
        kv_bytes_per_token_per_gpu=plan.kv_bytes_per_token_per_gpu,
        kv_capacity_tokens=plan.kv_capacity_tokens,
        peak_flops=_peak_flops(gpu, plan.weights_format) * scales.compute_scale,
        bandwidth_bytes_s=gpu.mem_bandwidth_tb_s * 1e12 * scales.bandwidth_scale,
        link_bytes_s=gpu.interconnect_bandwidth_gb_s * 1e9 / 2,
        spec=spec,
        kernels=kernels_for(cell, step_time),
    )


def resolve(
    config: EngineConfig, gpu: GPU, model: ModelSpec, params: PerfParams, *,
    acceptance: float | None = None,
) -> tuple[Deployment, PerfParams]:
    """The deployment of `config` and the parameters that apply to it: `params`, or their
    fallback's fit (`PerfParams.for_kernels`) when the step-time provider does not cover the
    cell and it runs on the roofline, whose peaks then take the fallback's GPU scales."""
    dep = deployment(config, gpu, model, acceptance=acceptance, scales=params.scales(gpu))
    used = params.for_kernels(dep.kernels.kind if dep.kernels is not None else FALLBACK_KIND)
    if used is not params:
        dep = deployment(config, gpu, model, acceptance=acceptance, scales=used.scales(gpu),
                         step_time=FALLBACK_KIND)
    return dep, used


def moe_dense_share(model: ModelSpec) -> float:
    """Share of the body weights every token reads: 1 for a dense model; for MoE the
    non-expert part (attention, shared experts, dense layers, router), derived from the
    published active and total counts. active = dense + (total − dense)·k/E, so
    dense/total = (active/total − k/E) / (1 − k/E). Taking active/total itself as the dense
    share (as before issue 12's MoE rows) counted the k routed experts twice: at one token
    the read was active/total + (1 − active/total)·k/E, 1.6-1.7x the active weights for
    gpt-oss-120b and Qwen3-235B-A22B, which skewed every low-batch MoE step and, through the
    shared fit, the dense ones too."""
    if not model.is_moe:
        return 1.0
    routed = (model.experts_per_token or 1) / (model.num_experts or 1)
    active = model.active_params_b / model.total_params_b
    return min(1.0, max(0.0, (active - routed) / (1.0 - routed))) if routed < 1 else 1.0


def _moe_touched_fraction(model: ModelSpec, tokens: float) -> float:
    """Share of the body weights one step reads: all of a dense model; for MoE the dense part
    (`moe_dense_share`) plus the experts that at least one of `tokens` routes to,
    1 − (1 − k/E)^tokens (active/total at one token)."""
    if not model.is_moe or tokens <= 0:
        return 1.0
    dense = moe_dense_share(model)
    k, e = model.experts_per_token or 1, model.num_experts or 1
    touched = 1.0 - (1.0 - k / e) ** tokens
    return dense + (1.0 - dense) * touched


def _roofline(compute_s: float, memory_s: float) -> float:
    return (compute_s**ROOFLINE_P + memory_s**ROOFLINE_P) ** (1.0 / ROOFLINE_P)


def draft_time(dep: Deployment, batch: Batch, params: EngineParams) -> float:
    """Seconds the speculative draft adds to a step with `batch.decode_seqs` decodes.

    k sequential draft forwards, each over the decode sequences: roofline of
    2·draft_params·decodes / tp FLOPs against the draft's weights per GPU plus its KV read
    (decodes·decode_context tokens), + overhead_share × step_overhead each, + the CPU
    proposer's time per sequence (ngram). 0 without speculation or without decodes.
    """
    spec = dep.spec
    if spec is None or batch.decode_seqs <= 0:
        return 0.0
    b = batch.decode_seqs
    compute_s = 2.0 * spec.draft_params * b / dep.tp / (dep.peak_flops * params.compute_efficiency)
    bytes_ = (spec.draft_weights_bytes + b * batch.decode_context * spec.draft_kv_bytes_per_token)
    memory_s = bytes_ / dep.tp / (dep.bandwidth_bytes_s * params.bandwidth_efficiency)
    per_draft = _roofline(compute_s, memory_s) + spec.overhead_share * params.step_overhead_s
    return spec.k * per_draft + spec.cpu_s_per_seq * b


def step_time(dep: Deployment, batch: Batch, params: EngineParams) -> float:
    """Seconds one engine iteration takes on the TP group.

    With speculative decoding (dep.spec, k draft tokens) each decode sequence carries
    q = k + 1 query tokens (verification), else q = 1; decode tokens = decode_seqs·q.
    compute = [2·(active params − embeddings)·tokens + 2·V·H·sampled + attention] / tp
              / (peak FLOP/s of the compute dtype × compute_efficiency),
      tokens = prefill_tokens + decode tokens, sampled = decode tokens + prefill_seqs,
      attention = 4·layers·heads·head_dim·(decode tokens·decode_context
                                           + prefill_tokens·prefill_context);
    memory  = [weights per GPU × MoE touched share + KV bytes per GPU read by decodes
               (decode_seqs·decode_context, once for all q) and written (all tokens)]
              / (HBM × bw_efficiency);
    roofline = (compute^p + memory^p)^(1/p), p = ROOFLINE_P;
    comm    = 2 all-reduces per layer of tokens·H·2 B, ring traffic 2(tp−1)/tp, over the
              one-way link bandwidth × interconnect_efficiency, + latency each (tp > 1);
    total   = roofline + comm + step_overhead + per_seq_overhead·sampled + draft_time.
    roofline + comm is the roofline provider's kernel time; another provider of `dep.kernels`
    (steptime.PROVIDERS, e.g. measured kernel tables) replaces those two terms only.

    Raises:
        UsageError: negative batch figures, or an empty batch.
    """
    q = dep.spec.k + 1.0 if dep.spec is not None else 1.0
    decode_tokens = batch.decode_seqs * q
    tokens = batch.prefill_tokens + decode_tokens
    if min(batch.prefill_tokens, batch.decode_seqs, batch.decode_context) < 0 or tokens <= 0:
        raise UsageError(f"step needs a non-empty, non-negative batch, got {batch}")
    kernels = dep.kernels or ROOFLINE
    sampled = decode_tokens + batch.prefill_seqs
    # Sampler and logits processors run once per sampled position: k + 1 per speculating
    # decode (what makes speculation costly at large batch beside compute-bound verification).
    overhead_s = params.step_overhead_s + params.per_seq_overhead_s * sampled
    return kernels.kernel_seconds(dep, batch, params) + overhead_s + draft_time(dep, batch, params)


def _roofline_kernel_s(dep: Deployment, batch: Batch, params: EngineParams) -> float:
    """The roofline of one forward + its TP all-reduces (step_time's first two terms)."""
    q = dep.spec.k + 1.0 if dep.spec is not None else 1.0
    decode_tokens = batch.decode_seqs * q
    tokens = batch.prefill_tokens + decode_tokens
    m = dep.model
    vocab_matrix = m.vocab_size * m.hidden_size
    heads = 1 if m.tie_word_embeddings else 2
    linear_params = max(m.active_params_b * 1e9 - heads * vocab_matrix, 0.0)
    sampled = decode_tokens + batch.prefill_seqs
    attn_width = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim
    attention = attn_width * (
        decode_tokens * batch.decode_context + batch.prefill_tokens * batch.prefill_context
    )
    flops = (2.0 * linear_params * tokens + 2.0 * vocab_matrix * sampled + attention) / dep.tp
    compute_s = flops / (dep.peak_flops * params.compute_efficiency)
    kv_tokens = batch.decode_seqs * batch.decode_context + tokens
    bytes_ = (
        dep.weights_bytes_per_gpu * _moe_touched_fraction(m, tokens)
        + kv_tokens * dep.kv_bytes_per_token_per_gpu
    )
    memory_s = bytes_ / (dep.bandwidth_bytes_s * params.bandwidth_efficiency)
    comm_s = 0.0
    if dep.tp > 1:
        message = tokens * m.hidden_size * ACTIVATION_BYTES
        traffic = 2.0 * (dep.tp - 1) / dep.tp * message
        per_allreduce = traffic / (dep.link_bytes_s * params.interconnect_efficiency)
        comm_s = ALLREDUCES_PER_LAYER * m.num_layers * (
            per_allreduce + params.allreduce_latency_s
        )
    return _roofline(compute_s, memory_s) + comm_s


# ---------------------------------------------------------------------------------------------
# Steady state of one fixed-length workload


class Prediction(BaseModel):
    """Steady-state figures of one fixed-length workload; throughputs over all GPUs.

    Latencies are means. With fixed ISL/OSL every request in steady state sees the same
    batch, so p50 = mean; tails (p90/p99) need the simulator and are not given here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: EngineKind = Field(description="Engine whose parameters were applied.")
    replicas: int = Field(ge=1, description="Data-parallel copies: gpus / tp.")
    batch: float = Field(gt=0, description="Running sequences per replica in steady state.")
    batch_limit: str = Field(description="What set the batch: concurrency, kv_capacity, ...")
    kv_capacity_tokens: int = Field(ge=0, description="KV tokens one replica holds.")
    step_time_s: float = Field(gt=0, description="Mean engine step time in steady state.")
    output_throughput_tok_s: float = Field(ge=0, description="Output tokens/s, all GPUs.")
    total_throughput_tok_s: float = Field(ge=0, description="Input + output tokens/s, all GPUs.")
    request_throughput_rps: float = Field(ge=0, description="Completed requests/s, all GPUs.")
    ttft_s: float = Field(ge=0, description="Mean time to first token (queueing included).")
    tpot_s: float = Field(ge=0, description="Mean time per output token after the first.")
    itl_s: float = Field(
        ge=0, description="Mean gap between emissions: one step (= TPOT without speculation)."
    )
    e2e_s: float = Field(ge=0, description="Mean end-to-end latency per request.")


class SchedulerDefaults(NamedTuple):
    """The scheduler knobs an engine uses on a GPU when the config leaves them unset."""

    max_num_seqs: int
    max_batched_tokens: int
    chunked_prefill: bool


def engine_defaults(engine: EngineKind, gpu: GPU) -> SchedulerDefaults:
    """(max_num_seqs, max_batched_tokens, chunked_prefill) of `engine` on `gpu` when the
    config leaves them unset (the one place the model, the simulator and `predict` read them)."""
    from engines import ENGINES

    plugin = ENGINES[engine]
    seqs, budget = plugin.scheduler_defaults(gpu.name, gpu.memory_gb)
    return SchedulerDefaults(seqs or NO_CAP_SEQS, budget, plugin.defaults.chunked_prefill)


def weight_quantization(precision: str) -> WeightQuantization:
    """`EngineConfig.weight_quantization` of a precision name (`PRECISIONS`).

    Raises:
        UsageError: an unknown precision name.
    """
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


@dataclass(slots=True)
class _Steady:
    batch: float
    limit: str
    steps_per_request: float
    decode_steps: float  # steps after the first token: (osl − 1) / tokens per step
    step_s: float
    ttft_service_s: float
    burst_s: float  # prefill of b prompts at once, in full-budget steps (offline start)


def _steady_state(
    dep: Deployment, p: EngineParams, demand: float, caps: tuple[int, int, bool],
    *, isl: int, osl: int,
) -> _Steady:
    seq_cap, budget, chunked = caps
    resident = isl + p.kv_reserve_output_fraction * osl
    kv_cap = dep.kv_capacity_tokens / resident
    if kv_cap < 1:
        raise UsageError(
            f"KV cache holds {dep.kv_capacity_tokens} tokens per replica, less than one "
            f"{isl}+{osl}-token request; add GPUs, quantize, or shorten the request"
        )
    limits = {"concurrency": demand, "kv_capacity": math.floor(kv_cap), "max_num_seqs": seq_cap}
    limit = min(limits, key=lambda k: limits[k])
    b = float(limits[limit])
    # Each request holds its slot for max(1 + D, token-budget-bound) steps, D = (osl − 1)/E
    # decode steps (E tokens per step, 1 without speculation, each verifying q tokens):
    # isl prefill tokens plus D·q decode tokens share the per-step budget with the other b − 1.
    e, q = (dep.spec.tokens_per_step, dep.spec.k + 1.0) if dep.spec else (1.0, 1.0)
    dsteps = (osl - 1) / e
    steps = max(1.0 + dsteps, b * (isl + dsteps * q) / budget)
    if steps > 1.0 + dsteps:
        limit = "token_budget"
    # Prefill is not spread thinly over the cycle: it comes in chunks of up to the budget left
    # beside the decodes (one prompt at a time when staggered), so n_p of the S steps carry a
    # c_p-token chunk and the rest decode only; the step time is the mix of the two.
    decodes = b * dsteps / steps
    c_p = max(1.0, min(budget - decodes * q, max(float(isl), b * isl / steps)))
    n_p = min(steps, b * isl / c_p)
    context = isl + osl / 2
    mixed = Batch(prefill_tokens=c_p, decode_seqs=decodes, decode_context=context,
                  prefill_context=isl / 2, prefill_seqs=c_p / isl)
    step_s = n_p / steps * step_time(dep, mixed, p)
    if n_p < steps:
        pure = Batch(prefill_tokens=0.0, decode_seqs=decodes, decode_context=context)
        step_s += (1.0 - n_p / steps) * step_time(dep, pure, p)
    chunk = float(isl) if not chunked else max(1.0, min(isl, budget - decodes * q))
    prefill_step = Batch(
        prefill_tokens=chunk, decode_seqs=max(b - 1, 0) * dsteps / (1.0 + dsteps),
        decode_context=isl + osl / 2, prefill_context=isl / 2, prefill_seqs=1,
    )
    ttft = math.ceil(isl / chunk) * step_time(dep, prefill_step, p)
    full = Batch(prefill_tokens=float(budget), decode_seqs=0.0, decode_context=0.0,
                 prefill_context=isl / 2, prefill_seqs=budget / isl)
    burst = b * isl / budget * step_time(dep, full, p)
    return _Steady(b, limit, steps, dsteps, step_s, ttft, burst)


def predict(
    config: EngineConfig,
    model: ModelSpec,
    gpu: GPU,
    load: LoadSpec,
    *,
    gpus: int | None = None,
    params: PerfParams | None = None,
    spec_acceptance: float | None = None,
) -> Prediction:
    """Steady-state serving of `config` (its engine, tp, format and scheduler knobs) under a
    fixed ISL/OSL `load`: closed loop at a concurrency, or offline (`num_requests` queued at
    t = 0, batch at the memory / max_num_seqs ceiling). `gpus` defaults to the config's tp.

    Continuous batching with prefill mixed into decode steps: each running request holds
    a slot for S = max(osl, B·(isl+osl−1)/token_budget) steps, so a mean step carries
    B·isl/S prefill tokens and B·(osl−1)/S decodes at context isl + osl/2. Then
    requests/s = replicas·B/(S·step), output tokens/s = requests/s·osl, TPOT = ITL = step;
    the step is the mix of n_p steps carrying a prefill chunk and S − n_p decode-only steps,
    TTFT = prefill of one prompt (in budget-sized chunks, beside the running decodes)
    + the budget wait (S − osl)·step + queueing: closed loop above the ceiling waits
    (C − B)/requests/s (Little's law); offline, requests beyond the first B wait for a
    slot and the first B share one prefill burst. E2E = TTFT + (osl − 1)·TPOT.
    The ramp-up/drain of a finite offline run is ignored (makespan = N / requests/s).
    The engine's request_overhead_s adds to TTFT and E2E, and to each closed-loop user's
    cycle when all users fit in the batch.
    `params` defaults to the fitted parameters (data/calibration/fit.json).
    Speculative decoding (`config.speculative`, per-token acceptance `spec_acceptance` or the
    method's default): E = (1 − a^(k+1))/(1 − a) tokens per decode step, so osl − 1 tokens
    take D = (osl − 1)/E steps of k + 1 verified tokens each (step_time adds the draft);
    S = max(1 + D, B·(isl + D·(k+1))/budget), TPOT = D·step/(osl − 1) = step/E, ITL = step
    (a step's tokens arrive together).

    An unset `config.max_model_len` is sized to the workload (`memory.size_max_model_len`).

    Raises:
        UsageError: a load other than fixed lengths in closed loop or offline, gpus not a
            multiple of tp, a config that does not fit in memory, or a request longer than
            max_model_len.
    """
    if load.lengths.kind == "trace" or load.arrival is None or load.arrival.kind == "rate":
        raise UsageError("the steady-state model takes fixed lengths in closed loop or offline")
    # Dataset lengths (core.load.DatasetLengths): the steady state of their means.
    isl, osl = load.lengths.input_tokens, load.lengths.output_tokens
    concurrency = load.arrival.concurrency if load.arrival.kind == "closed_loop" else None
    num_requests = load.num_requests
    demand_total = concurrency if concurrency is not None else num_requests
    if demand_total is None:
        raise UsageError("an offline load needs num_requests")
    engine, tp = config.engine, config.tp
    gpus = gpus or tp
    if gpus % tp:
        raise UsageError(f"gpus={gpus} is not a multiple of tp={tp}")
    replicas = gpus // tp
    # Unset, max_model_len is sized to the workload (as deployments set it), not the context.
    config, _ = size_max_model_len(config, model, isl + osl)
    if config.max_model_len is not None and isl + osl > config.max_model_len:
        raise UsageError(f"a {isl}+{osl}-token request exceeds max_model_len "
                         f"{config.max_model_len}; every request would be refused")
    plan = plan_memory(config, gpu, model)
    if not plan.fits:
        raise UsageError("; ".join(r.reason for r in plan.risks if r.blocking))
    dep, fitted = resolve(config, gpu, model, params or load_params(),
                          acceptance=spec_acceptance)
    p = fitted.engines[engine]
    seqs, budget, chunked = engine_defaults(engine, gpu)
    if config.chunked_prefill is not None:
        chunked = config.chunked_prefill
    caps = (config.max_num_seqs or seqs, config.max_batched_tokens or budget, chunked)
    s = _steady_state(dep, p, demand_total / replicas, caps, isl=isl, osl=osl)
    cycle_s = s.steps_per_request * s.step_s
    if concurrency is not None and concurrency / replicas <= s.batch:
        cycle_s += p.request_overhead_s  # each user idles the API time between requests
    rps_replica = s.batch / cycle_s
    ttft = s.ttft_service_s + max(0.0, s.steps_per_request - 1.0 - s.decode_steps) * s.step_s
    ttft += p.request_overhead_s
    if concurrency is not None:
        # Closed loop above the batch ceiling: Little's law, the extra c − B wait in queue.
        ttft += max(0.0, concurrency / replicas - s.batch) / rps_replica
    else:
        assert num_requests is not None
        n = num_requests / replicas
        waits = max(0.0, n - s.batch) * (max(0.0, n - s.batch) + 1) / (2 * rps_replica)
        first_wave = min(n, s.batch) * 0.5 * s.burst_s
        ttft += (waits + first_wave) / n
    e2e = ttft + s.decode_steps * s.step_s
    tpot = s.decode_steps * s.step_s / (osl - 1) if osl > 1 else s.step_s
    rps = rps_replica * replicas
    return Prediction(
        engine=engine, replicas=replicas, batch=s.batch, batch_limit=s.limit,
        kv_capacity_tokens=dep.kv_capacity_tokens, step_time_s=s.step_s,
        output_throughput_tok_s=rps * osl, total_throughput_tok_s=rps * (isl + osl),
        request_throughput_rps=rps, ttft_s=ttft, tpot_s=tpot, itl_s=s.step_s, e2e_s=e2e,
    )


__all__ = [  # the parameter records are re-exported from recommender.params
    "FIT_FILE", "ROOFLINE", "Batch", "Deployment", "EngineParams", "GpuScales", "PerfParams",
    "Prediction", "RooflineKernels", "SchedulerDefaults", "default_params", "deployment",
    "draft_time", "engine_defaults", "load_params", "moe_dense_share", "predict", "resolve",
    "roofline_kernels", "step_time", "weight_quantization",
]
