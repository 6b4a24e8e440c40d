"""Reading a vLLM config file back: the flags that map one to one onto EngineConfig fields,
vLLM's spellings mapped back to ours, expert parallelism from its switch, and the
`--speculative-config` JSON back to SpeculativeConfig fields.

The plug-in's `config_from_file` reads the file with these, then renders the config read and
refuses any difference.
"""

from __future__ import annotations

import json
from typing import Any

from engines.errors import EngineError
from engines.readback import reverse, unknown_key
from engines.vllm.spellings import KV_DTYPE, WEIGHT_QUANT

CONFIG_WHAT = "vLLM config file"
# Flags the file holds that map one to one onto an EngineConfig field.
FIELD_OF: dict[str, str] = {
    "tensor-parallel-size": "tp",
    "pipeline-parallel-size": "pp",
    "data-parallel-size": "dp",
    "max-num-seqs": "max_num_seqs",
    "max-num-batched-tokens": "max_batched_tokens",
    "gpu-memory-utilization": "gpu_memory_fraction",
    "enable-prefix-caching": "prefix_caching",
    "enable-chunked-prefill": "chunked_prefill",
    "max-model-len": "max_model_len",
    "host": "host",
    "port": "port",
}
_SPEC_KEYS = frozenset({"method", "model", "num_speculative_tokens", "prompt_lookup_max"})


def expert_parallel_back(fields: dict[str, Any]) -> int:
    """ep from the `enable-expert-parallel` switch read into fields["ep"]: tp×dp when on,
    else 1 (another value then differs from the re-rendered file, which refuses it)."""
    tp, dp = fields.get("tp", 1), fields.get("dp", 1)
    if fields.get("ep") is True and isinstance(tp, int) and isinstance(dp, int):
        return tp * dp
    return 1


kv_back = reverse({k: v for k, v in KV_DTYPE.items() if v != "auto"}, "kv-cache-dtype")
quant_back = reverse(WEIGHT_QUANT, "quantization")


def speculative_back(value: Any) -> dict[str, Any]:
    """SpeculativeConfig fields from the `speculative-config` JSON string."""
    try:
        spec = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        spec = None
    if not isinstance(spec, dict):
        raise EngineError(f"speculative-config in {CONFIG_WHAT} must be a JSON object string")
    for key in spec:
        if key not in _SPEC_KEYS:
            raise unknown_key(f"speculative-config.{key}", CONFIG_WHAT)
    return {
        "method": spec.get("method"),
        "num_tokens": spec.get("num_speculative_tokens"),
        "draft_model": spec.get("model"),
    }
