"""Capability checks every engine makes alike: the config is the plug-in's own, the GPU count,
head and layer divisibility, expert parallelism only for MoE models, the context length, FP8
KV caches and Marlin-kernel weight formats, and the pre-quantized checkpoint a config serves
where the engine cannot quantize on load.

Engine-neutral by construction: callers pass their own tables and wording. It must not branch
on an engine's name.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from engines.config import EngineConfig
from engines.errors import CapabilityError
from engines.facts import HardwareFacts, ModelFacts
from engines.layout import parallel_layout


def require_own(kind: str, config: EngineConfig) -> None:
    """Raises CapabilityError when `config` is for another engine."""
    if config.engine != kind:
        raise CapabilityError(f"config is for engine {config.engine!r}, not {kind!r}")


def check_moe_layout(config: EngineConfig, *, is_moe: bool, num_experts: int | None = None
                     ) -> None:
    """Expert and attention data parallelism only for MoE models, and never over more GPUs
    than the model has experts (the rules every engine and the performance model share).

    Raises:
        CapabilityError: TEP or DEP asked of a dense model, or ep above `num_experts`.
    """
    if (config.ep > 1 or config.dp > 1) and not is_moe:
        raise CapabilityError(
            f"{parallel_layout(config)} (ep={config.ep}, dp={config.dp}) splits MoE experts "
            "over GPUs; the model is dense (not mixture-of-experts)"
        )
    if num_experts is not None and config.ep > num_experts:
        raise CapabilityError(
            f"ep={config.ep} exceeds the model's {num_experts} experts: every "
            "expert-parallel rank must hold at least one expert"
        )


def check_parallelism(config: EngineConfig, hardware: HardwareFacts, model: ModelFacts, *,
                      kv_heads_must_divide: bool) -> None:
    """GPU count (`gpus_per_instance` per instance), expert/attention data parallelism only
    for MoE models and never over more GPUs than experts, attention-head and layer
    divisibility (and KV heads when the engine shards them: shard when tp divides them,
    replicate when they divide tp).

    Raises:
        CapabilityError: the first problem found.
    """
    _check_gpu_count(config, hardware)
    check_moe_layout(config, is_moe=model.is_moe, num_experts=model.num_experts)
    if model.num_attention_heads % config.tp:
        raise CapabilityError(
            f"tp={config.tp} must divide the model's {model.num_attention_heads} attention heads"
        )
    kv = model.num_kv_heads
    if kv_heads_must_divide and kv % config.tp and config.tp % kv:
        raise CapabilityError(
            f"tp={config.tp} and the model's {kv} KV heads must divide one another"
        )
    if model.num_layers is not None and config.pp > model.num_layers:
        raise CapabilityError(f"pp={config.pp} exceeds the model's {model.num_layers} layers")


def _check_gpu_count(config: EngineConfig, hardware: HardwareFacts) -> None:
    disagg = config.disaggregation
    count = 1 if disagg is None else disagg.prefill_instances + disagg.decode_instances
    needed = config.gpus_per_instance * count
    if needed > hardware.gpu_count:
        raise CapabilityError(
            f"tp×pp×dp×instances = {config.tp}×{config.pp}×{config.dp}×{count} = {needed} "
            f"GPUs, but only {hardware.gpu_count} available"
        )


def check_model_len(config: EngineConfig, model: ModelFacts) -> None:
    """Raises CapabilityError when max_model_len exceeds the model's context."""
    if config.max_model_len is not None and config.max_model_len > model.max_context_tokens:
        raise CapabilityError(
            f"max_model_len={config.max_model_len} exceeds the model's context of "
            f"{model.max_context_tokens} tokens"
        )


def check_fp8_kv(config: EngineConfig, hardware: HardwareFacts) -> None:
    """Policy, not an engine error: without FP8 hardware an FP8 KV cache only saves memory and
    pays conversions on every step, which our performance model does not represent.

    Raises:
        CapabilityError: an fp8* KV cache on a GPU without FP8.
    """
    if config.kv_cache_dtype.startswith("fp8") and "fp8" not in hardware.native_dtypes:
        raise CapabilityError(
            f"FP8 KV cache needs a GPU with FP8 support (compute capability >= 8.9 or "
            f"MI300); {hardware.gpu_name} has none"
        )


def check_marlin_weights(config: EngineConfig, hardware: HardwareFacts, model: ModelFacts, *,
                         engine: str, rendered: Mapping[str, str | None],
                         mxfp4_needs_ampere: bool) -> None:
    """Weight-quantization checks of engines that fall back to Marlin kernels on Ampere (FP8
    weight-only W8A16) and render awq/gptq as their Marlin variants (`rendered`).

    Raises:
        CapabilityError: the first quantization the GPU or model cannot run.
    """
    quant = config.weight_quantization
    if quant is None or quant == "none":
        return
    cc = hardware.compute_capability
    ampere_or_newer = hardware.vendor == "nvidia" and cc is not None and cc >= (8, 0)
    if quant == "fp8" and "fp8" not in hardware.native_dtypes and not ampere_or_newer:
        raise CapabilityError(
            f"FP8 weights need FP8 hardware or an Ampere+ NVIDIA GPU for {engine}'s Marlin "
            f"fallback; {hardware.gpu_name} has neither"
        )
    if quant in ("awq", "gptq") and not ampere_or_newer:
        raise CapabilityError(
            f"{quant} is rendered as {rendered[quant]}, whose Marlin kernels need an "
            f"NVIDIA GPU with compute capability >= 8.0; {hardware.gpu_name} is not one"
        )
    if quant == "nvfp4" and "fp4" not in hardware.native_dtypes:
        raise CapabilityError(
            f"NVFP4 weights need a Blackwell GPU (compute capability >= 10.0); "
            f"{hardware.gpu_name} has no FP4"
        )
    if quant == "mxfp4":
        # The mxfp4 methods quantize only fused-MoE experts (gpt-oss checkpoints).
        if not model.is_moe:
            raise CapabilityError(f"{engine}'s mxfp4 applies only to MoE experts; model is dense")
        if mxfp4_needs_ampere and hardware.vendor == "nvidia" and not ampere_or_newer:
            raise CapabilityError(
                f"MXFP4 needs compute capability >= 8.0 in {engine}; {hardware.gpu_name} is older"
            )


def prequantized_config(config: EngineConfig, model: ModelFacts | None, *, engine: str,
                        on_load: Collection[str], readable: Collection[str] | None = None,
                        fixes: str | Callable[[str], str]) -> EngineConfig:
    """`config` serving the model's pre-quantized checkpoint of its weight quantization, for an
    engine that quantizes a checkpoint on load only into the formats `on_load`.

    `config` is returned as it is when it asks for no quantization or a format in `on_load`,
    or when there are no facts or they say `config.model` is not unquantized
    (`weights_dtype` None: it is then taken to be in that format already). Otherwise the
    facts' checkpoint of that format is swapped in; `readable` limits that to the formats
    whose published checkpoints (`ModelFacts.quantized_checkpoints`) the engine reads (None:
    all of them). `fixes` is the refusal's tail, what to change (or a function of the format
    giving it).

    Raises:
        CapabilityError: no checkpoint in that format is known: one line, "weight_quantization=Q:
            `engine` cannot quantize the bf16 checkpoint M on load and no pre-quantized Q
            checkpoint of it is known; FIXES".
    """
    quant = config.weight_quantization
    if (quant is None or quant == "none" or quant in on_load or model is None
            or model.weights_dtype is None):
        return config
    checkpoint = model.quantized_checkpoints.get(quant)
    if checkpoint is None or (readable is not None and quant not in readable):
        raise CapabilityError(
            f"weight_quantization={quant}: {engine} cannot quantize the {model.weights_dtype} "
            f"checkpoint {config.model} on load and no pre-quantized {quant} checkpoint of it "
            f"is known; {fixes if isinstance(fixes, str) else fixes(quant)}"
        )
    if checkpoint == config.model:
        return config
    # Validated again: the name becomes the model argument of every launch command.
    return EngineConfig.model_validate({**config.model_dump(), "model": checkpoint})
