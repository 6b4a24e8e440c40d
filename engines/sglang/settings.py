"""EngineConfig → SGLang `launch_server` settings.

SGLang's command line and its `--config` YAML are made from one list of (long flag name,
value) pairs, so they cannot drift; this module renders that list from an EngineConfig, and
`engines.sglang.readback` reads a parsed config file back. Spellings follow SGLang 0.5.23.

SGLang's `--tp-size` is the instance's GPU count per stage: with `--dp-size D
--enable-dp-attention` each of the D attention ranks runs on tp-size/D GPUs, so our tp×dp
is rendered as tp-size (and read back as tp = tp-size / dp-size).
"""

from __future__ import annotations

from typing import Any

from engines.capability import require_own
from engines.config import EngineConfig, EngineKind
from engines.errors import CapabilityError
from engines.rendering import Setting, extra_settings, lookup

KIND: EngineKind = "sglang"
# NIXL needs no RDMA device name (Mooncake wants --disaggregation-ib-device) and matches the
# connector the vLLM plug-in uses.
DISAGG_TRANSFER_BACKEND = "nixl"

KV_DTYPE: dict[str, str | None] = {
    "auto": None,
    "fp16": None,  # SGLang has no fp16 option: auto is the model dtype, checked in check()
    "bf16": "bf16",
    "fp8": "fp8_e4m3",  # SGLang's fp8 spelling; e4m3 is what "fp8" means on CUDA
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "fp4": "fp4_e2m1",
}
_KV_DTYPE_REFUSED: dict[str, str] = {
    "int8": "SGLang has no int8 KV cache (choices: auto, fp8_e4m3, fp8_e5m2, bf16, fp4_e2m1); "
    "use fp8",
}
WEIGHT_QUANT: dict[str, str | None] = {
    "none": None,
    "fp8": "fp8",  # online FP8 on a BF16 checkpoint, or an FP8 checkpoint
    "awq": "awq_marlin",
    "gptq": "gptq_marlin",
    "nvfp4": "modelopt_fp4",
    "mxfp4": "mxfp4",
}
_WEIGHT_QUANT_REFUSED: dict[str, str] = {
    "int8": "SGLang's w8a8_int8 loads only pre-quantized W8A8 checkpoints; load one with "
    "weight_quantization unset",
    "int4": "SGLang has no --quantization value for generic int4 weights; use awq/gptq or a "
    "pre-quantized checkpoint with weight_quantization unset",
}
SPEC_ALGORITHM: dict[str, str] = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
    "mtp": "NEXTN",  # DeepSeek-style MTP layers; SGLang treats NEXTN as EAGLE on own heads
}
# Flags that EngineConfig owns even when a field is unset (so extra_args cannot sneak them in).
RESERVED_FLAGS = frozenset(
    {
        "model-path", "model", "config", "tp-size", "tensor-parallel-size", "tp", "pp-size",
        "pipeline-parallel-size", "dp-size", "data-parallel-size", "dp", "enable-dp-attention",
        "ep-size", "expert-parallel-size", "ep", "max-running-requests", "chunked-prefill-size",
        "max-prefill-tokens", "mem-fraction-static", "disable-radix-cache", "kv-cache-dtype",
        "quantization", "context-length", "speculative-algorithm",
        "speculative-draft-model-path", "speculative-num-steps", "speculative-eagle-topk",
        "speculative-num-draft-tokens", "enable-metrics", "disaggregation-mode",
        "disaggregation-transfer-backend", "disaggregation-bootstrap-port", "host", "port",
    }
)  # fmt: skip


def settings(config: EngineConfig, role_settings: list[Setting]) -> list[Setting]:
    """The (long flag name, value) pairs for `config`, in render order, model included, with
    `role_settings` (a disaggregated instance's role flags) before host and port.

    Raises:
        CapabilityError: a config for another engine, or a value SGLang cannot express
            (int8 KV, int8/int4 weights, an extra arg that shadows a field or is `false`).
    """
    require_own(KIND, config)
    out: list[Setting] = [
        ("model-path", config.model),
        ("tp-size", config.tp * config.dp),  # SGLang's TP group spans all DP attention ranks
        ("pp-size", config.pp),
    ]
    optional: list[tuple[str, str | int | float | bool | None]] = [
        ("dp-size", config.dp if config.dp > 1 else None),
        ("enable-dp-attention", True if config.dp > 1 else None),
        ("ep-size", config.ep if config.ep > 1 else None),
        ("max-running-requests", config.max_num_seqs),
        *_token_budget(config),
        ("mem-fraction-static", config.gpu_memory_fraction),
        ("disable-radix-cache", True if config.prefix_caching is False else None),
        ("kv-cache-dtype", _kv_cache_dtype(config)),
        ("quantization", _quantization(config)),
        ("context-length", config.max_model_len),
    ]
    out += [(name, value) for name, value in optional if value is not None]
    if config.speculative is not None:
        out += _speculative_settings(config)
    out.append(("enable-metrics", True))  # /metrics answers 404 without it
    if config.disaggregation is not None:
        out.append(("disaggregation-transfer-backend", DISAGG_TRANSFER_BACKEND))
    out += role_settings
    out += [("host", config.host), ("port", config.port)]
    managed = {name for name, _ in out}
    out += extra_settings(config, managed | RESERVED_FLAGS, _flag_name, _sglang_extra_rules)
    return out


def flags(pairs: list[Setting]) -> list[str]:
    """`--name value` for each pair; `True` is a bare switch (SGLang's are store_true)."""
    argv: list[str] = []
    for name, value in pairs:
        if value is True:
            argv.append(f"--{name}")
        else:
            argv += [f"--{name}", str(value)]
    return argv


def _flag_name(key: str) -> str:
    """SGLang's argparse knows only dashed long flags; render `_` as `-`."""
    return key.replace("_", "-")


def _token_budget(config: EngineConfig) -> list[tuple[str, int | None]]:
    """`max_batched_tokens` → chunk size and prefill budget; chunked prefill off → -1.

    SGLang caps a step's prefill tokens by both --chunked-prefill-size and
    --max-prefill-tokens (default 16384), so both get the budget; without chunking the
    budget is --max-prefill-tokens alone (SGLang still admits one prompt up to the
    context length).
    """
    budget = config.max_batched_tokens
    if config.chunked_prefill is False:
        return [("chunked-prefill-size", -1), ("max-prefill-tokens", budget)]
    return [("chunked-prefill-size", budget), ("max-prefill-tokens", budget)]


def _kv_cache_dtype(config: EngineConfig) -> str | None:
    return lookup("kv_cache_dtype", config.kv_cache_dtype, KV_DTYPE, _KV_DTYPE_REFUSED)


def _quantization(config: EngineConfig) -> str | None:
    quant = config.weight_quantization
    if quant is None:
        return None
    return lookup("weight_quantization", quant, WEIGHT_QUANT, _WEIGHT_QUANT_REFUSED)


def _speculative_settings(config: EngineConfig) -> list[Setting]:
    """K = `num_tokens` draft tokens per step, as a chain (top-k 1).

    Drafting methods get `--speculative-num-steps K --speculative-eagle-topk 1
    --speculative-num-draft-tokens K+1`: SGLang counts the verified root token in
    num-draft-tokens and requires K+1 when top-k is 1. SGLang's docs ask for all three or
    none; we set all three so the proposal length is the one the performance model assumed.
    NGRAM builds its own tree, so it gets only `--speculative-num-draft-tokens K+1`.
    """
    spec = config.speculative
    assert spec is not None  # callers check
    out: list[Setting] = [("speculative-algorithm", SPEC_ALGORITHM[spec.method])]
    if spec.draft_model is not None:  # SpeculativeConfig: eagle, eagle3, draft_model only
        out.append(("speculative-draft-model-path", spec.draft_model))
    if spec.method != "ngram":
        out += [("speculative-num-steps", spec.num_tokens), ("speculative-eagle-topk", 1)]
    out.append(("speculative-num-draft-tokens", spec.num_tokens + 1))
    return out


def _sglang_extra_rules(key: str, name: str, value: Any, so_far: list[Setting]) -> None:
    if value is False:
        raise CapabilityError(
            f"extra_args[{key!r}] is false; SGLang switches are store_true flags, so "
            "leave the flag out instead"
        )
