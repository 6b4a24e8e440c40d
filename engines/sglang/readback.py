"""Reading an SGLang config file back into EngineConfig fields: the flags that map one to one
onto a field, SGLang's spellings mapped back to ours (our tp is its tp-size over dp-size), and
the speculative flags back to SpeculativeConfig fields. Rendering is `engines.sglang.settings`.
"""

from __future__ import annotations

from typing import Any

from engines.errors import EngineError
from engines.readback import reverse, unknown_key
from engines.sglang.settings import KIND, KV_DTYPE, RESERVED_FLAGS, SPEC_ALGORITHM, WEIGHT_QUANT

CONFIG_WHAT = "SGLang config file"
# Flags the file holds that map one to one onto an EngineConfig field.
_FIELD_OF: dict[str, str] = {
    "tp-size": "tp",  # tp×dp: divided by dp-size once read (`_attention_tp`)
    "pp-size": "pp",
    "dp-size": "dp",
    "ep-size": "ep",
    "max-running-requests": "max_num_seqs",
    "mem-fraction-static": "gpu_memory_fraction",
    "context-length": "max_model_len",
    "host": "host",
    "port": "port",
}
# Flags read back through the rendering (checked by re-rendering, not parsed on their own).
_DERIVED = frozenset(
    {"model-path", "max-prefill-tokens", "speculative-draft-model-path", "speculative-num-steps",
     "speculative-eagle-topk", "speculative-num-draft-tokens", "enable-metrics",
     "enable-dp-attention"}
)  # fmt: skip

_kv_back = reverse(KV_DTYPE, "kv-cache-dtype")
_quant_back = reverse(WEIGHT_QUANT, "quantization")
_method_back = reverse(SPEC_ALGORITHM, "speculative-algorithm")


def config_fields(model: str, data: dict[str, Any]) -> dict[str, Any]:
    """EngineConfig fields from a parsed config file (flag name → value).

    Unchecked beyond the keys: the caller validates them and re-renders to compare.

    Raises:
        EngineError: a key ServeFit does not write (named), or a disaggregated instance's file.
    """
    fields: dict[str, Any] = {"engine": KIND, "model": model}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key in _FIELD_OF:
            fields[_FIELD_OF[key]] = value
        elif key == "disable-radix-cache":
            fields["prefix_caching"] = False if value is True else value
        elif key == "chunked-prefill-size":
            chunked = value != -1
            fields["chunked_prefill"] = None if chunked else False
            fields["max_batched_tokens"] = value if chunked else data.get("max-prefill-tokens")
        elif key == "kv-cache-dtype":
            fields["kv_cache_dtype"] = _kv_back(value, CONFIG_WHAT)
        elif key == "quantization":
            fields["weight_quantization"] = _quant_back(value, CONFIG_WHAT)
        elif key == "speculative-algorithm":
            fields["speculative"] = _speculative_back(data)
        elif key.startswith("disaggregation-"):
            raise EngineError(
                f"{CONFIG_WHAT} is one instance of a disaggregated deployment; its instance "
                "counts are not in the file, so it cannot be read back"
            )
        elif key in RESERVED_FLAGS and key not in _DERIVED:
            raise unknown_key(key, CONFIG_WHAT)
        elif key not in _DERIVED:
            extra[key] = value
    return {**fields, "tp": _attention_tp(fields), "extra_args": extra}


def _attention_tp(fields: dict[str, Any]) -> Any:
    """Our tp: SGLang's tp-size over dp-size (left as read when they do not divide, so the
    re-rendered file differs and refuses it)."""
    tp, dp = fields.get("tp", 1), fields.get("dp", 1)
    if isinstance(tp, int) and isinstance(dp, int) and dp > 0 and tp % dp == 0:
        return tp // dp
    return tp


def _speculative_back(data: dict[str, Any]) -> dict[str, Any]:
    """SpeculativeConfig fields: K = num-draft-tokens − 1 (see `engines.sglang.settings`)."""
    drafts = data.get("speculative-num-draft-tokens")
    return {
        "method": _method_back(data["speculative-algorithm"], CONFIG_WHAT),
        "num_tokens": drafts - 1 if isinstance(drafts, int) else drafts,
        "draft_model": data.get("speculative-draft-model-path"),
    }
