"""Plain facts about the hardware and the model that capability checks need.

The caller (the recommender's catalog) fills these in; `engines/` never looks anything up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_serializer, field_validator

from core.records import Record
from engines.config import WeightQuantization, model_problem

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4"]


class HardwareFacts(Record):
    """One deployment target: a number of identical GPUs."""

    gpu_name: str = Field(description="Catalog name of the GPU, e.g. 'H100 SXM'.")
    vendor: Literal["nvidia", "amd"] = Field(default="nvidia", description="GPU vendor.")
    compute_capability: tuple[int, int] | None = Field(
        default=None,
        description="CUDA compute capability (major, minor), e.g. (8, 0) for A100, (9, 0) for "
        "H100; None for non-NVIDIA GPUs.",
    )
    native_dtypes: frozenset[Dtype] = Field(
        description="Dtypes the GPU's matrix units compute natively (FP8 from sm_89/Hopper and "
        "MI300, FP4 from Blackwell).",
    )
    gpu_count: int = Field(ge=1, description="GPUs available to this deployment.")
    memory_per_gpu_gib: float = Field(gt=0, description="Memory of one GPU, GiB.")

    @field_serializer("native_dtypes")
    def _sorted(self, value: frozenset[str]) -> list[str]:
        # a set's order changes with each process's string hashing: the same recommendation
        # would write a different rec.json each run
        return sorted(value)


class ModelFacts(Record):
    """Architecture facts of the served model (from its config.json via the catalog)."""

    num_attention_heads: int = Field(ge=1, description="Query heads per layer.")
    num_kv_heads: int = Field(ge=1, description="Key/value heads per layer (GQA/MQA).")
    num_layers: int | None = Field(default=None, ge=1, description="Transformer layers.")
    max_context_tokens: int = Field(
        ge=1,
        description="Longest context the model supports (max_position_embeddings).",
    )
    is_moe: bool = Field(default=False, description="Mixture-of-experts model.")
    num_experts: int | None = Field(
        default=None, ge=1, description="Routed experts per MoE layer; None when unknown or "
        "dense.")
    weights_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        default=None,
        description="Unquantized dtype of the checkpoint (torch_dtype); None when unknown.",
    )
    has_mtp_heads: bool | None = Field(
        default=None,
        description="Checkpoint ships multi-token-prediction layers (DeepSeek-V3, Qwen3-Next, "
        "GLM-4.5...); None when unknown.",
    )
    quantized_checkpoints: dict[WeightQuantization, str] = Field(
        default_factory=dict,
        description="Published pre-quantized checkpoints of this model (HF ids) by weight "
        "quantization, for engines that cannot quantize the checkpoint into that format on "
        "load (awq ones are AutoAWQ checkpoints); empty when none is known.",
    )

    @field_validator("quantized_checkpoints")
    @classmethod
    def _checkpoints_are_models(cls, value: dict[str, str]) -> dict[str, str]:
        # Each name may become the model of a launch command.
        for quant, name in value.items():
            if quant == "none":
                raise ValueError("quantized_checkpoints has no 'none' format")
            problem = model_problem(name) if name else "must not be empty"
            if problem is not None:
                raise ValueError(f"quantized_checkpoints[{quant!r}]: model {problem}")
        return value
