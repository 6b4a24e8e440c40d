"""What a model's weights, KV cache and activations take: bytes per stored parameter and per
cached KV element by format, the formats a config serves (`weight_format`, `served_kv_dtype`),
their bytes on one GPU under TP, PP and attention DP, and a step token's peak activations
on one GPU under TP (`activation_bytes_per_token`).

Where the rest of a GPU's memory goes, and whether the deployment fits, is `memory`'s. Shapes
only: no timing, no engine launches, no I/O.
"""

from __future__ import annotations

import math

from engines.config import EngineConfig
from engines.registry import ENGINES
from recommender.catalog.specs import ModelSpec
from recommender.model.defaults import release_of

# Weight storage, bytes per parameter, scales included. Group-quantized 4-bit formats
# (int4/awq/gptq) assume group size 128 with one fp16 scale (2 B) and one packed 4-bit zero
# point (0.5 B) per group: 0.5 + 2.5/128. NVFP4: one fp8 scale per 16 → 0.5 + 1/16. MXFP4:
# one E8M0 scale per 32 → 0.5 + 1/32. FP8/INT8 per-tensor, per-channel or 128×128-block scales
# are < 0.1 % and ignored.
WEIGHT_BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.5 / 128,
    "awq": 0.5 + 2.5 / 128,
    "gptq": 0.5 + 2.5 / 128,
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
}
# Quantized checkpoints keep the input embedding and lm_head in bf16 (vLLM, SGLang and
# TRT-LLM leave them unquantized by default).
EMBEDDING_BYTES_PER_PARAM = 2.0

# KV-cache element bytes. "auto" is the model's activation dtype, bf16 even for FP8-weight
# checkpoints, unless the checkpoint declares its KV format (`served_kv_dtype`). fp4 is NVFP4:
# 0.5 B + one fp8 scale per 16 elements.
KV_DTYPE_BYTES: dict[str, float] = {
    "auto": 2.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "fp4": 0.5 + 1 / 16,
}


def served_kv_dtype(config: EngineConfig, model: ModelSpec, engine_version: str | None = None
                    ) -> str:
    """The KV-cache dtype the engine serves: the config's, or under auto the format the
    checkpoint declares (ModelOpt's FP8 KV cache) where the engine's release honours it."""
    declared = model.checkpoint_kv_dtype
    if config.kv_cache_dtype != "auto" or declared is None:
        return config.kv_cache_dtype
    honoured = ENGINES[config.engine].serves_checkpoint_kv_dtype(release_of(engine_version))
    return declared if honoured else config.kv_cache_dtype


def weight_format(config: EngineConfig, model: ModelSpec) -> str:
    """Storage format of the body weights: the quantization, or the checkpoint's own dtype."""
    quant = config.weight_quantization
    return model.checkpoint_dtype if quant is None or quant == "none" else quant


def weight_bytes(config: EngineConfig, model: ModelSpec, layers_per_gpu: int
                 ) -> tuple[float, float, float]:
    """(total bytes, bytes on the fullest GPU, routed-expert bytes on it).

    Body weights (published total minus embedding and lm_head) shard over TP×PP; an MoE
    model's routed experts over all tp × dp GPUs of a stage (by TP or EP: the same bytes),
    its dense part (attention, shared experts, router) over tp, a copy per attention-DP rank
    (`ModelSpec.dense_share`). The embedding and lm_head are vocab-parallel over TP; with PP
    the first stage holds the embedding and the last the lm_head (a copy when tied), so the
    fullest GPU has one of them.
    """
    fmt = weight_format(config, model)
    body_bpp = WEIGHT_BYTES_PER_PARAM[fmt]
    embed_bpp = EMBEDDING_BYTES_PER_PARAM  # 2 B whether the checkpoint is bf16/fp16 or quantized
    vocab = float(model.vocab_size * model.hidden_size)
    head_count = 1 if model.tie_word_embeddings else 2
    body = max(0.0, model.total_params_b * 1e9 - head_count * vocab) * body_bpp
    dense = body * model.dense_share()
    total = body + dense * (config.dp - 1) + head_count * vocab * embed_bpp * config.dp
    stage = layers_per_gpu / model.num_layers
    body_per_gpu = stage * (dense / config.tp + (body - dense) / (config.tp * config.dp))
    heads_on_fullest = head_count if config.pp == 1 else 1
    experts_per_gpu = stage * (body - dense) / (config.tp * config.dp)
    return total, body_per_gpu + heads_on_fullest * vocab * embed_bpp / config.tp, \
        experts_per_gpu


def kv_token_bytes_per_gpu(config: EngineConfig, model: ModelSpec, dtype_bytes: float
                           ) -> tuple[float, float]:
    """(KV bytes per token on one GPU of the fullest stage, replication factor across TP).

    GQA: KV heads shard over TP; when tp > kv_heads each GPU keeps one head and the heads are
    replicated tp/kv_heads times (vLLM/SGLang). MLA: the latent has no head axis, so every TP
    rank holds all of it (replicated tp times). PP splits the layers.
    """
    layers = math.ceil(model.num_layers / config.pp)
    per_layer = model.kv_bytes_per_token(dtype_bytes) / model.num_layers
    if model.attention == "mla":
        return layers * per_layer, float(config.tp)
    heads_per_gpu = math.ceil(model.num_kv_heads / config.tp)
    per_gpu = layers * per_layer * heads_per_gpu / model.num_kv_heads
    return per_gpu, heads_per_gpu * config.tp / model.num_kv_heads


# Activations at the profiling peak, per token of the step budget, in bf16: the hidden-wide
# tensors every TP rank holds whole (residual, normed input, attention output, MLP output) and,
# split over tp, the projections Megatron-style TP shards (Q, K, V; the MLP's gate, up and
# their product). For Llama-3.1-8B at tp 1 that is 32 B x hidden, the flat figure it replaces;
# the flat figure was not divided by tp and refused runs that served (Llama-3.1-405B FP8 on 8
# H100s at a 32,000-token budget: 16.8 GB a GPU of activations, where this count gives 5.6 GB).
ACTIVATION_DTYPE_BYTES = 2
REPLICATED_HIDDEN_TENSORS = 4
MLP_TENSORS = 3  # gate, up, and the activated product, each MLP-wide


def activation_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Peak activation bytes one token of a step holds on one GPU of a `tp`-way group: the
    replicated hidden-wide tensors plus the TP-sharded Q/K/V and MLP projections (an MoE
    token's MLP is its k routed experts and the shared ones, or the dense MLP where wider)."""
    qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim
    mlp = model.intermediate_size
    if model.is_moe:
        experts = (model.experts_per_token or 1) + model.num_shared_experts
        mlp = max(mlp, (model.moe_intermediate_size or 0) * experts)
    elements = REPLICATED_HIDDEN_TENSORS * model.hidden_size + (qkv + MLP_TENSORS * mlp) / tp
    return ACTIVATION_DTYPE_BYTES * elements
