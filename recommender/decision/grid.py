"""The candidate grid: which configurations exist, and which fit.

Owns the base grid (every engine plug-in × parallel layout (TP, and TEP / DEP for MoE) ×
weight format × KV format, with chunked prefill on where the engine leaves it off), the
window's max_model_len, the safe memory fraction, and pruning (the plug-in's own capability
check, then `memory.plan_memory`). The variants the later stages try are `variants`'s; the
staged search over them is `search`'s.
"""

from __future__ import annotations

import numpy as np

from engines.config import EngineConfig
from engines.errors import EngineError
from engines.registry import ENGINES
from recommender.catalog.specs import GPU, ModelSpec
from recommender.decision.goals import Target
from recommender.model.defaults import workload_max_model_len
from recommender.model.memory import SAFE_FRACTION_MAX, plan_memory
from recommender.sim.simulator import SimRequests

WEIGHT_FORMATS: tuple[tuple[str | None, str], ...] = ((None, "bf16"), ("fp8", "fp8"),
                                                      ("awq", "int4"))


def max_model_len(requests: SimRequests, model: ModelSpec) -> int:
    """The window's longest request (prompt + output) sized by `workload_max_model_len`."""
    return workload_max_model_len(int(np.max(requests.input_tokens + requests.output_tokens)),
                                  model)


def tp_options(gpus: int, model: ModelSpec) -> list[int]:
    """Divisors of `gpus` that divide the attention heads (the plug-ins check the rest)."""
    return [t for t in range(1, gpus + 1) if gpus % t == 0 and model.num_attention_heads % t == 0]


def layouts(gpus: int, model: ModelSpec) -> list[tuple[int, int, int]]:
    """(tp, dp, ep) of one instance: TP at every tp option; for an MoE model also TEP
    (experts over the TP group) at tp > 1 and DEP (attention DP ranks of one GPU each,
    experts over all of them) at every divisor of `gpus` above 1."""
    out = [(tp, 1, 1) for tp in tp_options(gpus, model)]
    if model.is_moe:
        out += [(tp, 1, tp) for tp in tp_options(gpus, model) if tp > 1]
        out += [(1, g, g) for g in range(2, gpus + 1) if gpus % g == 0]
    return out


def weight_formats(gpu: GPU, model: ModelSpec) -> list[str | None]:
    """None (the checkpoint as it is) plus FP8 / 4-bit where the GPU runs them and the
    checkpoint is unquantized. An engine that cannot quantize into a format on load
    (TensorRT-LLM any, vLLM and SGLang awq) refuses it, in `prune`, when the model has no
    known pre-quantized checkpoint in it (the `served_config` its export would deploy), so
    every kept candidate can be exported."""
    if model.checkpoint_dtype not in ("bf16", "fp16"):
        return [None]
    return [q for q, dtype in WEIGHT_FORMATS if q is None or dtype in gpu.weight_dtypes]


def kv_formats(gpu: GPU) -> list[str]:
    return ["auto", "fp8"] if "fp8" in gpu.kv_cache_dtypes else ["auto"]


def prune(config: EngineConfig, target: Target) -> str | None:
    """Why `config` cannot run here (plug-in check, then memory), or None when it can."""
    try:
        ENGINES[config.engine].check(config, target.hardware, target.model_facts)
    except EngineError as exc:
        return f"{config.engine}: {exc}"
    plan = plan_memory(config, target.gpu, target.model)
    blocking = [r for r in plan.risks if r.blocking]
    return f"memory: {blocking[0].code}" if blocking else None


def base_grid(target: Target, model_len: int) -> list[EngineConfig]:
    """Every engine × parallel layout (TP, and TEP / DEP for MoE) × weight format × KV
    format, engine defaults elsewhere."""
    return [
        EngineConfig(engine=kind, model=target.model.name, tp=tp, dp=dp, ep=ep,  # type: ignore[arg-type]
                     weight_quantization=quant, kv_cache_dtype=kv,  # type: ignore[arg-type]
                     max_model_len=model_len, gpu_memory_fraction=safe_fraction(kind),
                     chunked_prefill=chunked)
        for kind in ENGINES
        for chunked in _chunked_options(kind)
        for tp, dp, ep in layouts(target.gpus, target.model)
        for quant in weight_formats(target.gpu, target.model)
        for kv in kv_formats(target.gpu)
    ]


def _chunked_options(kind: str) -> list[bool | None]:
    """The default, plus chunked prefill on where the engine leaves it off (without it a
    long prompt must fit one step's budget, which can rule the engine out)."""
    return [None] if ENGINES[kind].defaults.chunked_prefill else [None, True]


def safe_fraction(kind: str) -> float | None:
    """SAFE_FRACTION_MAX where the engine's default memory fraction is above the safe band
    (DESIGN §4.9: 0.85-0.90; higher risks OOM under bursts), else None (the default)."""
    default = ENGINES[kind].defaults.gpu_memory_fraction
    return SAFE_FRACTION_MAX if default is not None and default > SAFE_FRACTION_MAX else None
