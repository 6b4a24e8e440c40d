"""How ServeFit's values are spelled in vLLM's flags, and the values vLLM cannot take:
KV-cache dtypes, weight quantization methods (the Marlin variants for awq/gptq), and the
`--speculative-config` JSON.

Written against vLLM 0.33; spellings follow shared/reference/engines.md. The plug-in renders
with these tables and `engines.vllm.readback` reads them back.
"""

from __future__ import annotations

from engines.config import EngineConfig

NGRAM_PROMPT_LOOKUP_MAX = 4

KV_DTYPE: dict[str, str] = {
    # vLLM's explicit "bfloat16"/"float16" are only valid for models whose KV default is fp8
    # (CacheConfig docstring); for the rest, "auto" is the model dtype (VllmEngine.check).
    "auto": "auto",
    "bf16": "auto",
    "fp16": "auto",
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
KV_DTYPE_REFUSED: dict[str, str] = {
    "int8": "vLLM has no plain int8 KV cache (only int8_per_token_head on newer main, "
    "unverified for 0.33); use fp8",
    "fp4": "vLLM's nvfp4 KV cache is unverified for 0.33; use fp8",
}
WEIGHT_QUANT: dict[str, str | None] = {
    "none": None,
    "fp8": "fp8",  # dynamic FP8 on a BF16 checkpoint, or vLLM's own FP8 checkpoints
    # Pre-quantized formats: name the Marlin variant, which vLLM picks itself only when
    # --quantization is unset; a bare "awq"/"gptq" pins the slow kernels.
    "awq": "awq_marlin",
    "gptq": "gptq_marlin",
    "nvfp4": "modelopt_fp4",
    "mxfp4": "mxfp4",
}
WEIGHT_QUANT_REFUSED: dict[str, str] = {
    "int8": "vLLM has no --quantization value for generic int8 weights; load a pre-quantized "
    "(compressed-tensors W8A8) checkpoint with weight_quantization unset",
    "int4": "vLLM has no --quantization value for generic int4 weights; use awq/gptq or a "
    "pre-quantized (compressed-tensors W4A16) checkpoint with weight_quantization unset",
}
_SPEC_WITH_MODEL = frozenset({"eagle", "eagle3", "draft_model"})


def speculative_config(config: EngineConfig) -> dict[str, str | int]:
    """The `--speculative-config` JSON object of `config` (which has a speculative section)."""
    spec = config.speculative
    assert spec is not None  # callers check
    out: dict[str, str | int] = {"method": spec.method}
    if spec.method in _SPEC_WITH_MODEL:
        assert spec.draft_model is not None  # SpeculativeConfig validates this
        out["model"] = spec.draft_model
    out["num_speculative_tokens"] = spec.num_tokens
    if spec.method == "ngram":
        out["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP_MAX
    return out
