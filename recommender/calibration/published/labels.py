"""The published CSV's labels in the model's words: its engine, GPU, precision and metric
names mapped onto engine kinds, catalog GPUs, `predict` precisions and `Prediction` fields in SI
units over all GPUs (`precision_of`, `metric_of`, `gpu_of`). The numbers a row's columns state
are `recommender.calibration.published.columns`.
"""

from __future__ import annotations

import re

from core.errors import ServeFitError
from recommender.catalog.lookup import get_gpu

# CSV engine → engine kind. NIM's engine is not stated; NIM 1.8 serves Llama-3.3-70B FP8 on
# H100 with its TensorRT-LLM profile, so its rows count as trtllm (an assumption, reported).
ENGINE_NAMES = {
    "tensorrt-llm": "trtllm",
    "vllm": "vllm",
    "vllm (ROCm build)": "vllm",
    "sglang": "sglang",
    "nim (backend engine not stated in excerpt)": "trtllm",
}
# CSV GPU → catalog name. "H100 80GB" / "H100" are taken as SXM (NIM and SGLang benchmark on
# SXM systems; GPUStack's pages that say which H100 name the SXM, so its unstated ones too).
# The GPUStack A100's memory is not stated: a 40 GB card cannot hold Qwen3-14B
# bf16 (29.6 GB) plus one 32K-token sequence, which those rows serve, so it is the 80 GB.
GPU_NAMES = {
    "H200 SXM 141GB": "H200",
    "H100 SXM 80GB": "H100-SXM",
    "H100 80GB": "H100-SXM",
    "H100": "H100-SXM",
    "B200 180GB": "B200",
    "MI300X 192GB": "MI300X",
    "A100 80GB": "A100-80GB",
    "A100 (40/80GB variant not stated)": "A100-80GB",
    "H100 (SXM/PCIe not stated)": "H100-SXM",
}
# CSV precision → (predict precision, kv_cache_dtype). Rows whose notes name ModelOpt
# checkpoints (trtllm-bench) get an FP8 KV cache (kv_cache_quant_algo FP8; assumed).
PRECISIONS = {
    "BF16": ("bf16", "auto"),
    "FP8": ("fp8", "auto"),
    "FP8 weights + FP8 KV": ("fp8", "fp8"),
    "FP4 (NVFP4)": ("nvfp4", "auto"),
    "FP8 checkpoint on A100 (no FP8 tensor cores; weight-only path)": ("fp8", "auto"),
    "AWQ int4": ("awq", "auto"),
    # The checkpoints' own formats: gpt-oss ships its experts in MXFP4, DeepSeek in FP8.
    "MXFP4 (native gpt-oss checkpoint)": ("mxfp4", "auto"),
    "FP8 (native DeepSeek)": ("fp8", "auto"),
}
# (CSV metric, unit) → (Prediction field, factor to SI).
METRICS = {
    ("total_output_throughput", "output tokens/s (all GPUs)"): ("output_throughput_tok_s", 1.0),
    ("output_throughput", "output tokens/s"): ("output_throughput_tok_s", 1.0),
    ("throughput", "tokens/s"): ("output_throughput_tok_s", 1.0),  # AIPerf: "likely output"
    ("total_token_throughput", "tokens/s (in+out)"): ("total_throughput_tok_s", 1.0),
    ("request_throughput", "req/s"): ("request_throughput_rps", 1.0),
    ("mean_ttft", "ms"): ("ttft_s", 1e-3),
    ("mean_tpot", "ms"): ("tpot_s", 1e-3),
    ("mean_itl", "ms"): ("itl_s", 1e-3),
    ("end_to_end_batch_latency", "s"): ("e2e_s", 1.0),
}


# Precision labels the exact map lacks, by the format they name (first match wins):
# "MXFP4", "NVFP4 weights", "FP8 (block)", "BF16"...
PRECISION_WORDS = (("mxfp4", "mxfp4"), ("nvfp4", "nvfp4"), ("fp4", "nvfp4"), ("fp8", "fp8"),
                   ("int4", "int4"), ("awq", "awq"), ("gptq", "gptq"), ("int8", "int8"),
                   ("bf16", "bf16"), ("fp16", "fp16"))
# A throughput stated per GPU or per N-GPU node: multiplied to all GPUs of the run.
PER_GPU = re.compile(r"(?:per|/)\s*gpu\b", re.IGNORECASE)
PER_NODE = re.compile(r"per\s+(\d+)-gpu\s+node", re.IGNORECASE)


def precision_of(label: object) -> tuple[str, str]:
    """(predict precision, kv_cache_dtype) of a row's precision label.

    Raises:
        ValueError: a label naming no format the model knows.
    """
    text = str(label)
    if text in PRECISIONS:
        return PRECISIONS[text]
    low = text.lower()
    kv = "fp8" if re.search(r"fp8\s*kv|kv\s*fp8", low) else "auto"
    for word, precision in PRECISION_WORDS:
        if word in low:
            return precision, kv
    raise ValueError(f"precision {text!r} not mapped")


def metric_of(metric: str, unit: str, gpus: int) -> tuple[str, float]:
    """(Prediction field, factor to SI over all GPUs) of a row's metric and unit: the exact
    map, or a throughput stated per GPU / per node scaled to the run's GPUs.

    Raises:
        ValueError: a metric/unit that is ambiguous or not predictable per request.
    """
    if (metric, unit) in METRICS:
        return METRICS[(metric, unit)]
    per_node = PER_NODE.search(unit)
    scale = gpus if PER_GPU.search(unit) else (gpus / int(per_node.group(1)) if per_node
                                               else None)
    base = re.sub(r"_per_(gpu|node)$", "", metric)
    fields = {"output_throughput": "output_throughput_tok_s",
              "total_output_throughput": "output_throughput_tok_s",
              "total_token_throughput": "total_throughput_tok_s",
              "request_throughput": "request_throughput_rps"}
    if scale is not None and base in fields:
        return fields[base], float(scale)
    raise ValueError(f"metric/unit {(metric, unit)} ambiguous or not per-request-predictable")


def gpu_of(label: str) -> str:
    """The catalog name of a row's GPU: the map's, else the catalog's own name or alias.

    Raises:
        ValueError: a GPU the catalog lacks.
    """
    if label in GPU_NAMES:
        return GPU_NAMES[label]
    try:
        return get_gpu(label).name
    except ServeFitError as exc:
        raise ValueError(f"GPU {label!r} not mapped") from exc
