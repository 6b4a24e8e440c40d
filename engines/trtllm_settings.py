"""EngineConfig ↔ TensorRT-LLM settings: the two halves of a `trtllm-serve` launch, both ways.

The halves are the `trtllm-serve` command-line (flag, value) pairs and the
`--extra_llm_api_options` mapping (LlmArgs keys); this module renders both from an
EngineConfig and reads them back into EngineConfig fields. Why the halves are disjoint is in
`engines.trtllm`'s docstring. Spellings follow TensorRT-LLM 1.2.1, PyTorch backend.

TensorRT-LLM's `--tp_size` is the instance's GPU count per stage; `enable_attention_dp: true`
turns its ranks into attention data-parallel ranks of attention TP 1. So DEP (tp = 1, dp ranks)
is `--tp_size dp --ep_size dp` plus that key, and DEP with tp > 1 is refused (not expressible).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from engines.common import extra_settings, lookup, require_own, reverse, unknown_key
from engines.config import EngineConfig, EngineKind
from engines.errors import CapabilityError, EngineError

KIND: EngineKind = "trtllm"
BACKEND = "pytorch"
# UCX is the transceiver the disaggregation README uses in its examples (docs disagree on
# whether DEFAULT means UCX or NIXL, so name it).
CACHE_TRANSCEIVER_BACKEND = "UCX"
NGRAM_MATCHING_SIZE = 4
OPTIONS_WHAT = "TensorRT-LLM extra options file"

Role = Literal["server", "prefill", "decode"]
Setting = tuple[str, str | int | float | bool]

_KV_DTYPE: dict[str, str | None] = {
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
_DECODING_TYPE: dict[str, str] = {
    "eagle3": "Eagle3",
    "draft_model": "DraftTarget",
    "ngram": "NGram",
    "mtp": "MTP",
}
# Docs pair these drafters with `disable_overlap_scheduler: true`.
_NO_OVERLAP_SPEC = frozenset({"draft_model", "ngram"})
_CLI_FIELD: dict[str, str] = {
    "host": "host", "port": "port", "tp_size": "tp", "pp_size": "pp", "ep_size": "ep",
    "max_batch_size": "max_num_seqs", "max_num_tokens": "max_batched_tokens",
    "max_seq_len": "max_model_len",
}  # fmt: skip
_KV_FIELD = {"free_gpu_memory_fraction": "gpu_memory_fraction",
             "enable_block_reuse": "prefix_caching"}
# Keys read back through the rendering (checked by re-rendering, not parsed on their own).
_DERIVED_KEYS = frozenset({"disable_overlap_scheduler", "return_perf_metrics",
                           "enable_iter_perf_stats"})
_SPEC_KEYS = frozenset({"decoding_type", "max_draft_len", "speculative_model_dir",
                        "max_matching_ngram_size", "is_keep_all", "is_use_oldest",
                        "is_public_pool", "num_nextn_predict_layers"})
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


# -- rendering -----------------------------------------------------------------------------


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
    kv_dtype = lookup("kv_cache_dtype", config.kv_cache_dtype, _KV_DTYPE, _KV_DTYPE_REFUSED)
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
        "decoding_type": _DECODING_TYPE[spec.method],
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


# -- reading back --------------------------------------------------------------------------

_kv_back = reverse(_KV_DTYPE, "kv_cache_config.dtype")
_method_back = reverse(_DECODING_TYPE, "speculative_config.decoding_type")


def config_fields(model: str, options: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """EngineConfig fields from a launch's argv and its parsed extra options mapping.

    Unchecked beyond the keys: the caller validates them and re-renders to compare.

    Raises:
        EngineError: a key ServeFit does not write (named), or a disaggregated worker's file.
    """
    fields: dict[str, Any] = {"engine": KIND, "model": model, **_cli_fields(argv)}
    for key, value in options.items():
        if key == "kv_cache_config" and isinstance(value, dict):
            fields |= _kv_fields(value)
        elif key == "enable_chunked_prefill":
            fields["chunked_prefill"] = value
        elif key == "enable_attention_dp":
            # Every tp_size rank is an attention DP rank of attention TP 1 (another value
            # differs from the re-rendered file, which refuses it).
            fields |= {"dp": fields.get("tp", 1), "tp": 1} if value is True else {}
        elif key == "speculative_config" and isinstance(value, dict):
            fields["speculative"] = _speculative_back(value)
        elif key == "cache_transceiver_config":
            raise EngineError(
                f"{OPTIONS_WHAT} is one worker of a disaggregated deployment; its instance "
                "counts are not in the file, so it cannot be read back"
            )
        elif key not in _DERIVED_KEYS:
            raise unknown_key(key, OPTIONS_WHAT)
    return fields


def _cli_fields(argv: Sequence[str]) -> dict[str, Any]:
    """EngineConfig fields from `trtllm-serve MODEL --flag [value] …` (checked by re-rendering)."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    index = 2
    while index < len(argv):
        flag = argv[index]
        valued = index + 1 < len(argv) and not argv[index + 1].startswith("--")
        value: Any = argv[index + 1] if valued else True
        index += 2 if valued else 1
        name = flag.removeprefix("--")
        if name in _CLI_FIELD:
            fields[_CLI_FIELD[name]] = value
        elif name not in ("backend", "extra_llm_api_options"):
            extra[name] = _cli_value(value)
    return {**fields, "extra_args": extra}


def _cli_value(text: str | bool) -> str | int | float | bool:
    """An extra arg's CLI text back as the number it spells, else as text."""
    for kind in (int, float):
        try:
            number = kind(text)
        except (TypeError, ValueError):
            continue
        if isinstance(text, str) and str(number) == text:
            return number
    return text


def _kv_fields(kv: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in kv.items():
        if key in _KV_FIELD:
            fields[_KV_FIELD[key]] = value
        elif key == "dtype":
            fields["kv_cache_dtype"] = _kv_back(value, OPTIONS_WHAT)
        else:
            raise unknown_key(f"kv_cache_config.{key}", OPTIONS_WHAT)
    return fields


def _speculative_back(spec: dict[str, Any]) -> dict[str, Any]:
    for key in spec:
        if key not in _SPEC_KEYS:
            raise unknown_key(f"speculative_config.{key}", OPTIONS_WHAT)
    return {
        "method": _method_back(spec.get("decoding_type"), OPTIONS_WHAT),
        "num_tokens": spec.get("max_draft_len"),
        "draft_model": spec.get("speculative_model_dir"),
    }
