"""The catalog's knowledge handed to the engines' capability checks as plain facts.

`engines/` never looks anything up (it imports nothing of ours); this module turns a catalog
GPU and model into its `HardwareFacts` and `ModelFacts`, and completes an export request that
names a GPU but carries no facts.
"""

from __future__ import annotations

from core.errors import UnknownCatalogEntryError
from engines.export.request import ExportRequest
from engines.facts import Dtype, HardwareFacts, ModelFacts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.catalog.specs import GPU, ModelSpec

GIB = 2**30


def hardware_facts(gpu: GPU, gpu_count: int) -> HardwareFacts:
    """Facts for `gpu_count` GPUs of one catalog kind (dtypes its matrix units run natively)."""
    native: set[Dtype] = {"fp16", "bf16"}
    optional: tuple[tuple[Dtype, float | None], ...] = (
        ("fp8", gpu.fp8_dense_tflops), ("int8", gpu.int8_dense_tops),
        ("fp4", gpu.fp4_dense_tflops))
    native |= {name for name, tflops in optional if tflops}
    capability = None
    if gpu.vendor == "nvidia":
        major, minor = gpu.compute_capability.split(".")
        capability = (int(major), int(minor))
    return HardwareFacts(
        gpu_name=gpu.name,
        vendor=gpu.vendor,
        compute_capability=capability,
        native_dtypes=frozenset(native),
        gpu_count=gpu_count,
        memory_per_gpu_gib=gpu.memory_gb * 1e9 / GIB,
    )


def model_facts(model: ModelSpec) -> ModelFacts:
    """Facts of a catalog (or user config.json) model, with its published pre-quantized
    checkpoints. MTP heads are not in the catalog."""
    unquantized = model.checkpoint_dtype if model.checkpoint_dtype in ("bf16", "fp16") else None
    return ModelFacts(
        num_attention_heads=model.num_attention_heads,
        num_kv_heads=model.num_kv_heads,
        num_layers=model.num_layers,
        max_context_tokens=model.max_context_tokens,
        is_moe=model.num_experts is not None,
        num_experts=model.num_experts,
        weights_dtype=unquantized,
        quantized_checkpoints={quant: checkpoint.name
                               for quant, checkpoint in model.quantized_checkpoints.items()},
    )


def with_catalog_facts(request: ExportRequest) -> ExportRequest:
    """The request with facts from the catalog when it names a known GPU and model.

    Left as it is when it already carries facts, names no GPU, or the GPU or model is not in
    the catalog (the export then says the capability check was skipped).
    """
    if request.hardware is not None or request.gpu is None:
        return request
    try:
        gpu, model = get_gpu(request.gpu), get_model(request.config.model)
    except UnknownCatalogEntryError:
        return request
    count = request.gpu_count or request.config.gpus_per_instance
    return request.model_copy(update={"hardware": hardware_facts(gpu, count),
                                      "model_facts": model_facts(model)})
