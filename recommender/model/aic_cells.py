"""Where a step cell lands in aiconfigurator-core: the name maps from ServeFit's catalog onto
aiconfigurator's systems, backends, model paths, quantization modes and parallel layouts (TP,
TEP: experts over the TP group, DEP: attention data parallelism + experts over every rank),
and the cell key (`cell_key`) one table is built and cached under.

Quantization is set explicitly from ServeFit's memory plan (aiconfigurator's default follows
the HF config, not what the engine runs). A model named by one of its bundled HF ids (a
catalog model through `MODELS`, or one `catalog.get_model` read from that bundled config) is
its bundled config (`model_reference`); dense models it does not bundle (Qwen3-14B, a user's
own config.json) are a config.json synthesized from the ModelSpec's shapes when their block is
Llama-style (`synthesized_config`). Names only: aiconfigurator is not imported here.
"""

from __future__ import annotations

import json
from typing import Any

from recommender.catalog.specs import ModelSpec
from recommender.model.steptime import StepCell

# ServeFit GPU → aiconfigurator system (systems/*.yaml). Not listed (MI300X, A10G, A100-40GB,
# L4 without engine tables): not covered.
SYSTEMS = {
    "H100-SXM": "h100_sxm", "H100-PCIe": "h100_pcie", "H200": "h200_sxm", "B200": "b200_sxm",
    "A100-80GB": "a100_sxm", "L40S": "l40s",
}
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
# ServeFit model → aiconfigurator model path (model_configs/ bundled): the same architecture
# and shapes (Llama-3.3-70B is Llama-3.1-70B's architecture; instruct = base shapes).
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
}
# Dense model types whose shapes aiconfigurator's LLAMA family models (a Llama-style block:
# GQA attention + gated MLP), for models it does not bundle (Qwen3-14B, Qwen2.5, Mistral, a
# user's own config.json): a config.json is written from the ModelSpec (`synthesized_config`).
DENSE_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
}
SYNTH_PREFIX = "config:"  # a model reference that is a synthesized config.json (JSON text)
# memory plan's weight format → (GEMM quant mode, MoE quant mode) aiconfigurator runs.
WEIGHT_MODES = {
    "bf16": ("bfloat16", "bfloat16"), "fp16": ("bfloat16", "bfloat16"),
    "fp8": ("fp8", "fp8"), "int8": ("int8_wo", "bfloat16"),
    "int4": ("int4_wo", "int4_wo"), "awq": ("int4_wo", "int4_wo"), "gptq": ("int4_wo", "int4_wo"),
    "nvfp4": ("nvfp4", "nvfp4"), "mxfp4": ("bfloat16", "w4a16_mxfp4"),
}
# Families whose FP8 checkpoints are block-scaled (128x128 weight blocks): DeepSeek-V3/R1's
# native weights and Qwen3's official -FP8 releases ("fine-grained fp8, block size 128").
# Their GEMMs and MoE run aiconfigurator's fp8_block kernels, not per-tensor fp8 (measured
# tables differ up to 2x: Qwen3-235B-A22B MoE at TP4, 256 decodes, 121 vs 57 ms on vLLM).
FP8_BLOCK_FAMILIES = frozenset({"deepseek_v3", "qwen3", "qwen3_moe"})
# FP8 weights on a GPU without FP8 tensor cores (Ampere) run weight-only: vLLM and SGLang
# dequantize them in Marlin's W8A16 GEMMs, TensorRT-LLM refuses FP8 GEMMs there. The math is
# bf16, so the bf16 tables price it; they read 2-byte weights where Marlin reads 1, so a
# batch small enough to be weight-bandwidth bound comes out slower than it runs (up to ~2x at
# one sequence), from tens of sequences on within a few percent (the GEMMs compute-bound).
WEIGHT_ONLY_FP8_MODES = ("bfloat16", "bfloat16")
KV_MODES = {"bf16": "bfloat16", "fp8": "fp8"}


def synthesized_config(model: ModelSpec) -> dict[str, Any] | None:
    """A Hugging Face config.json for a dense model aiconfigurator does not bundle, from the
    ModelSpec's shapes; None for MoE, MLA or windowed attention (shapes its LLAMA family
    would get wrong)."""
    arch = DENSE_ARCHITECTURES.get(model.model_type)
    if arch is None or model.is_moe or model.attention != "gqa" or model.attention_window:
        return None
    return {
        "architectures": [arch], "model_type": model.model_type,
        "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads, "head_dim": model.head_dim,
        "intermediate_size": model.intermediate_size, "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_context_tokens,
        "tie_word_embeddings": model.tie_word_embeddings, "torch_dtype": "bfloat16",
        "hidden_act": "silu", "rms_norm_eps": 1e-6,
    }


def model_reference(model: ModelSpec) -> str | None:
    """aiconfigurator's bundled model path for `model` (`MODELS`, else the bundled config of
    that HF id), else a synthesized config (`SYNTH_PREFIX` + JSON), else None (not covered)."""
    if model.name in MODELS:
        return MODELS[model.name]
    from recommender.catalog.bundled import find_bundled

    bundled = find_bundled(model.name)
    if bundled is not None and bundled.hf_id == model.name:  # the id itself, not a short name
        return bundled.hf_id
    config = synthesized_config(model)
    return SYNTH_PREFIX + json.dumps(config, sort_keys=True) if config is not None else None


def cell_key(cell: StepCell) -> tuple[str, ...] | None:
    """(system, backend, model reference, tp, dp, ep, gemm, moe, kv) of `cell`, None when a
    name has no aiconfigurator counterpart."""
    system, backend = SYSTEMS.get(cell.gpu.name), BACKENDS.get(cell.engine)
    path = model_reference(cell.model)
    modes, kv = WEIGHT_MODES.get(cell.weights_format), KV_MODES.get(cell.kv_cache_dtype)
    if cell.weights_format == "fp8" and cell.gpu.fp8_dense_tflops is None:
        modes = WEIGHT_ONLY_FP8_MODES  # no FP8 tensor cores: weight-only, whatever the scaling
    elif cell.weights_format == "fp8" and cell.model.model_type in FP8_BLOCK_FAMILIES:
        modes = ("fp8_block", "fp8_block")
    if None in (system, backend, path, modes, kv):
        return None
    assert system and backend and path and modes and kv
    return (system, backend, path, str(cell.tp), str(cell.dp), str(cell.ep), modes[0],
            modes[1], kv)


__all__ = ["BACKENDS", "DENSE_ARCHITECTURES", "FP8_BLOCK_FAMILIES", "KV_MODES", "MODELS",
           "SYNTH_PREFIX", "SYSTEMS", "WEIGHT_MODES", "WEIGHT_ONLY_FP8_MODES", "cell_key",
           "model_reference", "synthesized_config"]
