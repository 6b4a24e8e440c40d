"""The memory model: where one GPU's bytes go (weights, framework reserve, KV cache, headroom).

Owns `plan_memory` (one `EngineConfig` on one GPU kind, per GPU and per TP×PP group), the
framework reserve, each engine's memory-fraction semantics, the OOM risks, and the
KV-capacity arithmetic built on the plan. What the weights and one token's KV take per GPU
is `footprint`'s. Shapes only: no timing, no engine launches, no I/O.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from core.errors import UsageError
from core.records import Record
from engines.config import EngineConfig, EngineKind
from engines.registry import ENGINES
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import memory_fraction, scheduler_caps
from recommender.model.footprint import (
    KV_DTYPE_BYTES,
    activation_bytes_per_token,
    kv_token_bytes_per_gpu,
    served_kv_dtype,
    weight_bytes,
    weight_format,
)

GIB = 2**30

# Framework reserve per GPU — calibration candidates, not measurements. Fixed: CUDA context
# (~0.5 GiB) + cuBLAS workspaces and CUDA-graph pools (~1 GiB); NCCL buffers add 0.5 GiB when
# the group spans more than one GPU. Activations at the profiling peak: the step budget's
# tokens × `footprint.activation_bytes_per_token` (sharded by tp where TP shards them).
FIXED_RESERVE_BYTES = int(1.5 * GIB)
NCCL_RESERVE_BYTES = int(0.5 * GIB)

SAFE_FRACTION_MAX = 0.90  # DESIGN §4.9: 0.85–0.90 is the safe band
LOW_HEADROOM_FRACTION = 0.05

# What each engine's memory-fraction knob is a fraction of (the knobs are not comparable):
# total — vLLM gpu-memory-utilization: weights + reserve + KV ≤ f × total memory;
# static_pool — SGLang mem-fraction-static: weights + KV ≤ f × total, reserve outside it;
# free_after_weights — TRT-LLM free_gpu_memory_fraction: KV = f × (total − weights − reserve).
FractionSemantics = Literal["total", "static_pool", "free_after_weights"]

FractionSource = Literal["config", "engine_release", "engine_default", "fallback"]
RiskCode = Literal[
    "weights_exceed_memory",
    "no_kv_cache_room",
    "kv_below_max_model_len",
    "fraction_above_safe_band",
    "low_headroom",
]


class OomRisk(Record):
    """One reason the deployment may not start or may run out of memory under load."""

    code: RiskCode = Field(description="Stable identifier of the risk.")
    blocking: bool = Field(description="True = the engine will not start or cannot serve.")
    reason: str = Field(description="One line with the numbers behind the flag.")


class MemoryPlan(Record):
    """Where each GPU's memory goes for one config; bytes per GPU unless named `_total`."""

    engine: EngineKind = Field(description="Engine whose memory semantics were applied.")
    gpu_name: str = Field(description="Catalog GPU name.")
    model_name: str = Field(description="Catalog model name.")
    tp: int = Field(ge=1, description="Tensor-parallel size.")
    pp: int = Field(ge=1, description="Pipeline-parallel size.")
    gpus: int = Field(ge=1, description="GPUs of one instance: tp × pp × dp.")
    gpu_memory_bytes: float = Field(gt=0, description="Memory of one GPU, bytes.")
    gpu_memory_fraction: float = Field(description="The engine's fraction knob, resolved.")
    fraction_source: FractionSource = Field(description="Where the fraction came from.")
    fraction_semantics: FractionSemantics = Field(description="What the fraction is of.")
    weights_format: str = Field(description="Weight storage format of the transformer body.")
    weights_bytes_total: float = Field(ge=0, description="All weights, whole deployment.")
    weights_bytes_per_gpu: float = Field(ge=0, description="Weights on the fullest GPU.")
    expert_weights_bytes_per_gpu: float = Field(
        default=0.0, ge=0, description="Routed MoE experts among them (0 for dense models).")
    max_batched_tokens: int = Field(ge=1, description="Step token budget used for activations.")
    activation_reserve_bytes_per_gpu: float = Field(ge=0, description="Peak activation space.")
    fixed_reserve_bytes_per_gpu: float = Field(ge=0, description="CUDA context, graphs, NCCL.")
    reserve_bytes_per_gpu: float = Field(ge=0, description="Activation + fixed reserve.")
    kv_dtype_bytes: float = Field(gt=0, description="Bytes per cached KV element.")
    kv_bytes_per_token_total: float = Field(
        gt=0, description="KV bytes one token takes summed over the group's GPUs."
    )
    kv_bytes_per_token_per_gpu: float = Field(gt=0, description="KV bytes per token on a GPU.")
    kv_replication_factor: float = Field(
        ge=1, description="Copies of each KV element held across TP (1 = fully sharded)."
    )
    layers_per_gpu: int = Field(ge=1, description="Layers on the fullest pipeline stage.")
    kv_cache_bytes_per_gpu: float = Field(ge=0, description="KV pool on each GPU.")
    kv_cache_bytes_total: float = Field(ge=0, description="KV pool over the whole group.")
    block_size_tokens: int = Field(ge=1, description="Tokens per KV block.")
    kv_capacity_blocks: int = Field(ge=0, description="Whole KV blocks the group can hold.")
    kv_capacity_tokens: int = Field(ge=0, description="Tokens the group's KV cache holds.")
    max_model_len: int = Field(ge=1, description="Longest sequence the config allows.")
    headroom_bytes_per_gpu: float = Field(description="Memory the engine leaves unclaimed.")
    headroom_fraction: float = Field(description="Headroom as a share of GPU memory.")
    fits: bool = Field(description="No blocking risk: the engine starts and can serve.")
    risks: list[OomRisk] = Field(default_factory=list, description="OOM risks, with reasons.")
    notes: list[str] = Field(default_factory=list, description="What the plan leaves out.")


def _reserve(config: EngineConfig, gpu: GPU, model: ModelSpec) -> tuple[int, float, float]:
    """(step token budget, activation bytes, fixed bytes) per GPU; the budget is the one the
    engine's scheduler runs with (`defaults.scheduler_caps`)."""
    tokens = scheduler_caps(config, gpu).budget_tokens
    activation = float(tokens * activation_bytes_per_token(model, config.tp))
    fixed = float(FIXED_RESERVE_BYTES + (NCCL_RESERVE_BYTES if config.gpus_per_instance > 1
                                         else 0))
    return tokens, activation, fixed


def _kv_room(
    semantics: FractionSemantics, fraction: float, memory: float, weights: float, reserve: float
) -> tuple[float, float]:
    """(KV pool bytes, headroom bytes) on one GPU under the engine's fraction semantics."""
    if semantics == "total":
        kv = fraction * memory - weights - reserve
        return kv, memory - max(kv, 0.0) - weights - reserve
    if semantics == "static_pool":
        kv = fraction * memory - weights
        return kv, memory - max(kv, 0.0) - weights - reserve
    free = memory - weights - reserve
    kv = fraction * free
    return kv, free - max(kv, 0.0)


def _risks(plan: dict[str, float], fraction: float) -> list[OomRisk]:
    """OOM risks from the per-GPU figures in `plan` (bytes), most severe first."""
    gb = 1e9
    risks: list[OomRisk] = []
    memory, weights, reserve = plan["memory"], plan["weights"], plan["reserve"]
    if weights + reserve > memory:
        reason = (
            f"weights {weights / gb:.1f} GB + reserve {reserve / gb:.1f} GB per GPU exceed "
            f"the GPU's {memory / gb:.0f} GB; raise tp/pp or quantize the weights"
        )
        risks.append(OomRisk(code="weights_exceed_memory", blocking=True, reason=reason))
    elif plan["blocks"] < 1:
        reason = (
            f"gpu_memory_fraction {fraction:.2f} leaves {max(plan['kv'], 0.0) / gb:.2f} GB "
            "per GPU for the KV cache, less than one block; raise the fraction or tp/pp"
        )
        risks.append(OomRisk(code="no_kv_cache_room", blocking=True, reason=reason))
    elif plan["tokens"] < plan["max_model_len"]:
        reason = (
            f"KV cache holds {int(plan['tokens'])} tokens, fewer than one max_model_len "
            f"({int(plan['max_model_len'])}) sequence; lower max_model_len or add memory"
        )
        risks.append(OomRisk(code="kv_below_max_model_len", blocking=True, reason=reason))
    if fraction > SAFE_FRACTION_MAX:
        reason = (
            f"gpu_memory_fraction {fraction:.2f} is above {SAFE_FRACTION_MAX:.2f} "
            "(0.85-0.90 is the safe band); bursts risk OOM"
        )
        risks.append(OomRisk(code="fraction_above_safe_band", blocking=False, reason=reason))
    headroom = plan["headroom"] / memory
    if headroom < LOW_HEADROOM_FRACTION:
        reason = (
            f"{headroom:.1%} of GPU memory left unclaimed (< {LOW_HEADROOM_FRACTION:.0%}); "
            "activation peaks or fragmentation can OOM"
        )
        risks.append(OomRisk(code="low_headroom", blocking=headroom < 0, reason=reason))
    return risks


def _draft_bytes(config: EngineConfig, model: ModelSpec) -> float:
    """The speculative draft's weights over the group (reserved beside the target's); 0 when
    there is none or its draft model is not in the catalog (then noted as uncounted)."""
    from recommender.model.speculative import draft_weights_bytes

    try:
        return draft_weights_bytes(config.speculative, model)
    except UsageError:
        return 0.0


def _notes(config: EngineConfig, model: ModelSpec) -> list[str]:
    notes = []
    if config.speculative is not None:
        counted = _draft_bytes(config, model) > 0 or config.speculative.method == "ngram"
        notes.append(
            "speculative decoding: draft weights counted in the reserve, the draft's KV is not"
            if counted
            else "speculative decoding: draft model not in the catalog; its weights and KV "
            "are not counted"
        )
    if model.attention_window is not None:
        notes.append("windowed layers counted at full attention: KV capacity is a lower bound")
    if config.disaggregation is not None:
        notes.append("disaggregation: figures are per prefill or decode instance")
    return notes


def plan_memory(
    config: EngineConfig, gpu: GPU, model: ModelSpec, *, block_size_tokens: int = 16,
    engine_version: str | None = None,
) -> MemoryPlan:
    """Per-GPU memory plan of `config` serving `model` on a TP×PP group of `gpu`.

    Per GPU, on the fullest pipeline stage (the engines size every stage's KV pool to the
    smallest): weights, framework reserve, the KV pool the engine's fraction knob leaves,
    its capacity in tokens and blocks, and what stays unclaimed. With attention data
    parallelism (`config.dp`) the pool and its capacity are one DP rank's (each rank holds
    the KV of its own sequences); unset knobs are the engine's (`recommender.model.defaults`, the
    memory fraction of `engine_version` where that release's default differs). Not fitting is data
    (`fits=False` with blocking `risks`), so the recommender can rank candidates without
    exceptions. KV capacity counts whole blocks of `block_size_tokens`.

    Args:
        config: the serving configuration (None knobs take the engine plug-in's defaults).
        gpu: the GPU kind every rank runs on.
        model: the model's shapes and published parameter count.
        block_size_tokens: tokens per KV block (vLLM 16, SGLang 1, TRT-LLM 32 by default).

    Returns:
        The plan, bytes per GPU unless a field is named `_total`.

    Raises:
        UsageError: block_size_tokens < 1, or pp larger than the model's layer count.
    """
    if block_size_tokens < 1:
        raise UsageError(f"block_size_tokens must be >= 1, got {block_size_tokens}")
    if config.pp > model.num_layers:
        raise UsageError(f"pp={config.pp} exceeds the model's {model.num_layers} layers")
    memory = gpu.memory_gb * 1e9
    fraction, source = memory_fraction(config, engine_version)
    semantics = ENGINES[config.engine].defaults.memory_fraction_semantics
    layers = math.ceil(model.num_layers / config.pp)
    weights_total, weights, experts = weight_bytes(config, model, layers)
    tokens_budget, activation, fixed = _reserve(config, gpu, model)
    fixed += _draft_bytes(config, model) / config.tp
    kv_dtype = served_kv_dtype(config, model, engine_version)
    dtype_bytes = KV_DTYPE_BYTES[kv_dtype]
    kv_per_token, replication = kv_token_bytes_per_gpu(config, model, dtype_bytes)
    kv, headroom = _kv_room(semantics, fraction, memory, weights, activation + fixed)
    blocks = max(0, math.floor(kv / (kv_per_token * block_size_tokens)))
    max_model_len = config.max_model_len or model.max_context_tokens
    figures = {
        "memory": memory,
        "weights": weights,
        "reserve": activation + fixed,
        "kv": kv,
        "blocks": blocks,
        "tokens": blocks * block_size_tokens,
        "max_model_len": max_model_len,
        "headroom": headroom,
    }
    risks = _risks(figures, fraction)
    return MemoryPlan(
        engine=config.engine,
        gpu_name=gpu.name,
        model_name=model.name,
        tp=config.tp,
        pp=config.pp,
        gpus=config.gpus_per_instance,
        gpu_memory_bytes=memory,
        gpu_memory_fraction=fraction,
        fraction_source=source,  # type: ignore[arg-type]
        fraction_semantics=semantics,
        weights_format=weight_format(config, model),
        weights_bytes_total=weights_total,
        weights_bytes_per_gpu=weights,
        expert_weights_bytes_per_gpu=experts,
        max_batched_tokens=tokens_budget,
        activation_reserve_bytes_per_gpu=activation,
        fixed_reserve_bytes_per_gpu=fixed,
        reserve_bytes_per_gpu=activation + fixed,
        kv_dtype_bytes=dtype_bytes,
        kv_bytes_per_token_total=model.kv_bytes_per_token(dtype_bytes) * replication,
        kv_bytes_per_token_per_gpu=kv_per_token,
        kv_replication_factor=replication,
        layers_per_gpu=layers,
        kv_cache_bytes_per_gpu=max(kv, 0.0),
        kv_cache_bytes_total=max(kv, 0.0) * config.gpus_per_instance,
        block_size_tokens=block_size_tokens,
        kv_capacity_blocks=blocks,
        kv_capacity_tokens=blocks * block_size_tokens,
        max_model_len=max_model_len,
        headroom_bytes_per_gpu=headroom,
        headroom_fraction=headroom / memory,
        fits=not any(r.blocking for r in risks),
        risks=risks,
        notes=_notes(config, model) + ([
            f"KV cache {kv_dtype}: the checkpoint declares it and the engine serves it under "
            "--kv-cache-dtype auto"] if kv_dtype != config.kv_cache_dtype else []),
    )


def max_concurrent_sequences(plan: MemoryPlan, tokens_per_sequence: float) -> int:
    """Memory ceiling on running sequences: whole KV blocks over blocks per sequence.

    Each sequence takes ceil(tokens / block_size_tokens) blocks; engine caps such as
    max_num_seqs are not applied here.

    Args:
        plan: a plan from `plan_memory`.
        tokens_per_sequence: expected resident tokens per sequence (prompt + output so far).

    Returns:
        Sequences that fit at once (0 when the KV cache cannot hold one).

    Raises:
        UsageError: tokens_per_sequence is not positive.
    """
    if tokens_per_sequence <= 0:
        raise UsageError(f"tokens_per_sequence must be positive, got {tokens_per_sequence}")
    blocks_per_sequence = math.ceil(tokens_per_sequence / plan.block_size_tokens)
    return plan.kv_capacity_blocks // blocks_per_sequence
