"""Reading a TensorRT-LLM launch back into EngineConfig fields: the `trtllm-serve` argv and its
parsed `--extra_llm_api_options` mapping, with TensorRT-LLM's spellings mapped back to ours
and its attention DP ranks back to dp. Rendering is `engines.trtllm.settings`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engines.errors import EngineError
from engines.readback import reverse, unknown_key
from engines.trtllm.settings import DECODING_TYPE, KIND, KV_DTYPE

OPTIONS_WHAT = "TensorRT-LLM extra options file"
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

_kv_back = reverse(KV_DTYPE, "kv_cache_config.dtype")
_method_back = reverse(DECODING_TYPE, "speculative_config.decoding_type")


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
