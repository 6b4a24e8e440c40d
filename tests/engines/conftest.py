"""Hardware and model facts the engine plug-in tests share (plain values for parametrize)."""

from __future__ import annotations

from engines.facts import HardwareFacts, ModelFacts

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NASTY_MODEL = 'x; rm -rf / "$(id)"'
H100 = HardwareFacts(
    gpu_name="H100 SXM",
    compute_capability=(9, 0),
    native_dtypes=frozenset({"bf16", "fp16", "fp8", "int8"}),
    gpu_count=8,
    memory_per_gpu_gib=80,
)
A100 = HardwareFacts(
    gpu_name="A100 80GB SXM",
    compute_capability=(8, 0),
    native_dtypes=frozenset({"bf16", "fp16", "int8"}),
    gpu_count=8,
    memory_per_gpu_gib=80,
)
B200 = HardwareFacts(
    gpu_name="B200",
    compute_capability=(10, 0),
    native_dtypes=frozenset({"bf16", "fp16", "fp8", "int8", "fp4"}),
    gpu_count=8,
    memory_per_gpu_gib=180,
)
T4 = HardwareFacts(
    gpu_name="T4",
    compute_capability=(7, 5),
    native_dtypes=frozenset({"fp16", "int8"}),
    gpu_count=1,
    memory_per_gpu_gib=16,
)
MI300X = HardwareFacts(
    gpu_name="MI300X",
    vendor="amd",
    native_dtypes=frozenset({"bf16", "fp16", "fp8", "int8"}),
    gpu_count=8,
    memory_per_gpu_gib=192,
)
LLAMA_8B_FP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"  # the catalog's fp8 checkpoint of MODEL
LLAMA_8B_AWQ = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"  # and its (AutoAWQ) awq one
LLAMA_8B = ModelFacts(
    num_attention_heads=32,
    num_kv_heads=8,
    num_layers=32,
    max_context_tokens=131072,
    weights_dtype="bf16",
    quantized_checkpoints={"fp8": LLAMA_8B_FP8, "awq": LLAMA_8B_AWQ},
)
# The same shapes when `model` names a checkpoint already quantized (its format is its own).
LLAMA_8B_PREQUANTIZED = LLAMA_8B.model_copy(update={"weights_dtype": None,
                                                    "quantized_checkpoints": {}})
GPT_OSS = ModelFacts(num_attention_heads=64, num_kv_heads=8, max_context_tokens=131072, is_moe=True)
# Qwen3-235B-A22B's config.json: 64 query / 4 KV heads, 94 layers, 40960 positions, 128 experts.
QWEN3_MOE = ModelFacts(num_attention_heads=64, num_kv_heads=4, num_layers=94,
                       max_context_tokens=40960, is_moe=True, weights_dtype="bf16")
# Qwen3-8B's config.json shapes; the catalog knows no pre-quantized checkpoint of it.
QWEN3_8B = ModelFacts(num_attention_heads=32, num_kv_heads=8, num_layers=36,
                      max_context_tokens=40960, weights_dtype="bf16")
