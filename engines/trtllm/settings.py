"""EngineConfig → TensorRT-LLM settings: the two halves of a `trtllm-serve` launch.

The halves are the `trtllm-serve` command-line (flag, value) pairs and the
`--extra_llm_api_options` mapping (LlmArgs keys); this module renders both from an
EngineConfig, and `engines.trtllm.readback` reads them back. Why the halves are disjoint is in
`engines.trtllm.plugin`'s docstring. Spellings follow TensorRT-LLM 1.2.1, PyTorch backend.

TensorRT-LLM's `--tp_size` is the instance's GPU count per stage; `enable_attention_dp: true`
turns its ranks into attention data-parallel ranks of attention TP 1. So DEP (tp = 1, dp ranks)
is `--tp_size dp --ep_size dp` plus that key, and DEP with tp > 1 is refused (not expressible).
"""

from __future__ import annotations

from typing import Any, Literal

from engines.capability import require_own
from engines.config import EngineConfig, EngineKind
from engines.errors import CapabilityError
from engines.rendering import extra_settings, lookup

KIND: EngineKind = "trtllm"
BACKEND = "pytorch"
# UCX is the transceiver the disaggregation README uses in its examples (docs disagree on
# whether DEFAULT means UCX or NIXL, so name it).
CACHE_TRANSCEIVER_BACKEND = "UCX"
NGRAM_MATCHING_SIZE = 4

Role = Literal["server", "prefill", "decode"]
Setting = tuple[str, str | int | float | bool]

KV_DTYPE: dict[str, str | None] = {
    # "auto" follows the checkpoint; a bf16/fp16 KV cache is only ever the model dtype.
    "auto": None,
    "bf16": None,
    "fp16": None,
    "fp8": "fp8",  # TRT-LLM's FP8 KV cache is E4M3
    "fp8_e4m3": "fp8",
    "fp4": "nvfp4",
}
_KV_DTYPE_REFUSED: dict[str, str] = {
    "fp8_e5m2": "TensorRT-LLM's FP8 KV cache is E4M3 only; use fp8",
    "int8": "INT8 KV cache exists only on the TensorRT backend (quant_config."
    "kv_cache_quant_algo), not on the PyTorch backend this plug-in renders; use fp8",
}
# The PyTorch backend reads weight quantization from the checkpoint (hf_quant_config.json /
# config.json) and has no flag to force it, so weight_quantization renders nothing here: it
# declares the format of the checkpoint served, which `TrtllmEngine.served_config` swaps in
# for an unquantized model (or refuses), and is checked against the GPU.
_WEIGHT_QUANT_ACCEPTED = frozenset({"none", "fp8", "nvfp4", "awq"})
_WEIGHT_QUANT_REFUSED: dict[str, str] = {
    quant: "the PyTorch backend cannot quantize on load and this plug-in validates only "
    "pre-quantized ModelOpt FP8/NVFP4/W4A16-AWQ or HF FP8 checkpoints; use one of those "
    "(fp8, nvfp4, awq) or leave weight_quantization unset"
    for quant in ("int8", "int4", "gptq", "mxfp4")
}
DECODING_TYPE: dict[str, str] = {
    "eagle3": "Eagle3",
    "draft_model": "DraftTarget",
    "ngram": "NGram",
    "mtp": "MTP",
}
# Docs pair these drafters with `disable_overlap_scheduler: true`.
_NO_OVERLAP_SPEC = frozenset({"draft_model", "ngram"})
# CLI options EngineConfig owns (or whose LlmArgs key the YAML owns), aliases included.
_RESERVED_FLAGS = frozenset(
    {
        "backend", "host", "port", "tp_size", "tensor_parallel_size", "pp_size",
        "pipeline_parallel_size", "ep_size", "moe_expert_parallel_size", "enable_attention_dp",
        "max_batch_size", "max_num_tokens", "max_seq_len",
        "free_gpu_memory_fraction", "kv_cache_free_gpu_memory_fraction", "config",
        "extra_llm_api_options", "enable_chunked_prefill", "server_role",
    }
)  # fmt: skip


def cli_settings(config: EngineConfig) -> list[Setting]:
    """The (flag name, value) pairs of the command line, model and YAML path excluded.

    Raises:
        CapabilityError: a config for another engine, DEP with tp > 1, or an extra arg that
            shadows a setting EngineConfig renders.
    """
    require_own(KIND, config)
    _check_attention_dp(config)
    out: list[Setting] = [
        ("backend", BACKEND),
        ("host", config.host),
        ("port", config.port),
        ("tp_size", config.tp * config.dp),  # attention DP ranks are TP ranks in TRT-LLM
        ("pp_size", config.pp),
    ]
    optional: list[tuple[str, int | None]] = [
        ("ep_size", config.ep if config.ep > 1 else None),  # unset = 1 (experts TP-sharded)
        ("max_batch_size", config.max_num_seqs),
        ("max_num_tokens", config.max_batched_tokens),
        ("max_seq_len", config.max_model_len),
    ]
    out += [(name, value) for name, value in optional if value is not None]
    # click declares TRT-LLM's options with underscores and rejects dashed spellings.
    out += extra_settings(config, _RESERVED_FLAGS, lambda key: key.replace("-", "_"))
    return out


def extra_options(config: EngineConfig, role: Role = "server") -> dict[str, Any]:
    """The `--extra_llm_api_options` mapping for one process of `config` (see the plug-in's
    `extra_options` for what each key means).

    Raises:
        CapabilityError: a config for another engine, or a value the PyTorch backend cannot
            express (DEP with tp > 1, int8/e5m2 KV, EAGLE v1/v2, weight quantization it
            cannot load).
    """
    require_own(KIND, config)
    _check_attention_dp(config)
    _check_weight_quantization_renders(config)
    out: dict[str, Any] = {}
    if config.dp > 1:
        out["enable_attention_dp"] = True
    kv: dict[str, Any] = {}
    if config.gpu_memory_fraction is not None:
        kv["free_gpu_memory_fraction"] = config.gpu_memory_fraction
    if config.prefix_caching is not None:
        kv["enable_block_reuse"] = config.prefix_caching
    kv_dtype = lookup("kv_cache_dtype", config.kv_cache_dtype, KV_DTYPE, _KV_DTYPE_REFUSED)
    if kv_dtype is not None:
        kv["dtype"] = kv_dtype
    if kv:
        out["kv_cache_config"] = kv
    if config.chunked_prefill is not None:  # None = trtllm-serve's default (off)
        out["enable_chunked_prefill"] = config.chunked_prefill
    spec = config.speculative
    if spec is not None:
        out["speculative_config"] = _speculative_config(config)
    if (spec is not None and spec.method in _NO_OVERLAP_SPEC) or role == "prefill":
        out["disable_overlap_scheduler"] = True
    if config.disaggregation is not None:
        out["cache_transceiver_config"] = {"backend": CACHE_TRANSCEIVER_BACKEND}
    out["return_perf_metrics"] = True
    out["enable_iter_perf_stats"] = True
    return out


def _check_attention_dp(config: EngineConfig) -> None:
    if config.dp > 1 and config.tp > 1:
        raise CapabilityError(
            f"dp={config.dp} with tp={config.tp}: TensorRT-LLM's attention DP gives every rank "
            f"attention TP 1; use tp=1, dp={config.tp * config.dp}"
        )


def _check_weight_quantization_renders(config: EngineConfig) -> None:
    quant = config.weight_quantization
    if quant is not None and quant not in _WEIGHT_QUANT_ACCEPTED:
        raise CapabilityError(f"weight_quantization={quant}: {_WEIGHT_QUANT_REFUSED[quant]}")


def _speculative_config(config: EngineConfig) -> dict[str, Any]:
    spec = config.speculative
    assert spec is not None  # callers check
    if spec.method == "eagle":
        raise CapabilityError(
            "speculative method eagle: the PyTorch backend supports only EAGLE-3 drafts "
            "(EAGLE v1/v2 checkpoints are incompatible); use eagle3"
        )
    out: dict[str, Any] = {
        "decoding_type": DECODING_TYPE[spec.method],
        "max_draft_len": spec.num_tokens,
    }
    if spec.draft_model is not None:
        # `speculative_model_dir` is the field in older releases and an alias of
        # `speculative_model` in newer ones, so it loads on both.
        out["speculative_model_dir"] = spec.draft_model
    if spec.method == "ngram":
        out |= {
            "max_matching_ngram_size": NGRAM_MATCHING_SIZE,
            "is_keep_all": True,
            "is_use_oldest": True,
            "is_public_pool": True,
        }
    if spec.method == "mtp":
        out["num_nextn_predict_layers"] = spec.num_tokens  # must equal max_draft_len
    return out
