"""Typed hardware and model records (`GPU`, `ModelSpec`) and what follows from shapes alone.

KV bytes per token and parameter counts are derived from a model's shapes; no performance
model lives here. The catalogs (`catalog.py`) and user configs (`hf_config.py`) produce these.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from core.errors import UsageError
from core.records import Record
from engines.config import WeightQuantization, model_problem

Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]
Confidence = Literal["high", "medium", "low"]


class GpuPrice(Record):
    """One public on-demand list price of a GPU-hour, with where and when it was read."""

    usd_per_hour: float = Field(gt=0, description="USD per GPU per hour, on demand.")
    read_on: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$",
                                description="Date the price was read (None: given by the user).")
    source: str = Field(min_length=1, description="The provider page and offer.")


class GPU(Record):
    """One accelerator SKU. Compute figures are dense (no 2:4 sparsity); null = unsupported."""

    name: str = Field(description="canonical name, e.g. 'H100-SXM'")
    aliases: list[str] = Field(default_factory=list)
    vendor: Literal["nvidia", "amd"]
    architecture: str = Field(description="ampere, ada, hopper, blackwell, cdna3, ...")
    compute_capability: str = Field(description="NVIDIA 'major.minor' (e.g. '9.0'); AMD gfx id")
    memory_gb: float = Field(gt=0, description="usable device memory, GB (10^9 bytes)")
    memory_type: str
    mem_bandwidth_tb_s: float = Field(gt=0, description="peak memory bandwidth, TB/s")
    bf16_dense_tflops: float = Field(gt=0)
    fp8_dense_tflops: float | None = Field(default=None, gt=0)
    int8_dense_tops: float | None = Field(default=None, gt=0)
    fp4_dense_tflops: float | None = Field(default=None, gt=0)
    interconnect: Literal["nvlink", "xgmi", "pcie"]
    interconnect_bandwidth_gb_s: float = Field(
        gt=0, description="aggregate bidirectional GPU-to-GPU bandwidth per GPU, GB/s"
    )
    weight_dtypes: list[Dtype] = Field(description="weight formats the architecture runs")
    kv_cache_dtypes: list[Dtype]
    price: GpuPrice | None = Field(default=None, description="A public on-demand list price "
                                   "(a default: --gpu-price-per-hour overrides it).")
    confidence: Confidence = Field(description="confidence in the compute/memory figures")
    source: str
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        pattern = r"\d+\.\d+" if self.vendor == "nvidia" else r"gfx[0-9a-f]+"
        if not re.fullmatch(pattern, self.compute_capability):
            raise ValueError(
                f"compute_capability {self.compute_capability!r} is not a {self.vendor} id"
            )
        # A throughput figure and the dtype list must agree, or capability checks diverge.
        pairs = {
            "fp8_dense_tflops": (self.fp8_dense_tflops, "fp8" in self.weight_dtypes),
            "int8_dense_tops": (self.int8_dense_tops, "int8" in self.weight_dtypes),
            "fp4_dense_tflops": (
                self.fp4_dense_tflops,
                bool({"nvfp4", "mxfp4"} & set(self.weight_dtypes)),
            ),
        }
        for field, (value, listed) in pairs.items():
            if (value is not None) != listed:
                raise ValueError(f"{field} is {value} but weight_dtypes is {self.weight_dtypes}")
        if "bf16" not in self.weight_dtypes or "bf16" not in self.kv_cache_dtypes:
            raise ValueError("bf16 must be a supported weight and KV-cache dtype")
        return self

    @property
    def compute_capability_tuple(self) -> tuple[int, int] | None:
        """NVIDIA (major, minor) for `>=` checks such as FP8 needing (8, 9); None for AMD."""
        if self.vendor != "nvidia":
            return None
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)


class QuantizedCheckpoint(Record):
    """A published pre-quantized copy of a model, and where its name and format are stated."""

    name: str = Field(min_length=1, description="Hugging Face id of the quantized checkpoint.")
    source: str = Field(min_length=1, description="The page that names it and its format.")

    @field_validator("name")
    @classmethod
    def _name_is_a_model(cls, value: str) -> str:
        # It becomes the model of an engine's launch command.
        if (problem := model_problem(value)) is not None:
            raise ValueError(f"model {problem}")
        return value


class ModelSpec(Record):
    """Shapes of one decoder-only transformer, in the project's names (see models.yaml)."""

    name: str = Field(description="Hugging Face id, or the config path for a user's model")
    aliases: list[str] = Field(default_factory=list)
    model_type: str
    attention: Literal["gqa", "mla"] = Field(description="MHA is GQA with kv heads = heads")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0, description="query/key width per head")
    intermediate_size: int = Field(gt=0, description="dense-MLP width")
    moe_intermediate_size: int | None = Field(default=None, gt=0, description="one expert's width")
    vocab_size: int = Field(gt=0)
    max_context_tokens: int = Field(gt=0)
    num_experts: int | None = Field(default=None, gt=0, description="routed experts; null = dense")
    experts_per_token: int | None = Field(default=None, gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    num_dense_layers: int = Field(default=0, ge=0, description="MoE models: dense-MLP layers")
    kv_lora_rank: int | None = Field(default=None, gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    qk_nope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    attention_window: Literal["sliding", "chunked"] | None = None
    attention_window_tokens: int | None = Field(default=None, gt=0)
    windowed_layers: int | None = Field(default=None, gt=0)
    tie_word_embeddings: bool = False
    checkpoint_dtype: Dtype = "bf16"
    checkpoint_kv_dtype: Literal["fp8"] | None = Field(
        default=None, description="KV-cache format the checkpoint declares (ModelOpt's "
        "kv_cache_quant_algo, a kv_cache_scheme): what engines that honour it serve under "
        "--kv-cache-dtype auto; null = the model's activation dtype.")
    quantized_checkpoints: dict[WeightQuantization, QuantizedCheckpoint] = Field(
        default_factory=dict,
        description="Published pre-quantized checkpoints by weight quantization: what an "
        "engine that cannot quantize into that format on load (TensorRT-LLM; vLLM and SGLang "
        "for awq, gptq, nvfp4) serves for it.")
    total_params_b: float = Field(gt=0, description="billions")
    active_params_b: float = Field(gt=0, description="billions used per token")
    params_source: Literal["published", "estimated"] = "published"
    source: str = ""
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads {self.num_kv_heads} does not divide "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.head_dim % 2 or self.head_dim > self.hidden_size:
            raise ValueError(f"head_dim {self.head_dim} must be even and <= hidden_size")
        self._check_mla()
        self._check_moe()
        window = (self.attention_window, self.attention_window_tokens, self.windowed_layers)
        if any(v is None for v in window) and any(v is not None for v in window):
            raise ValueError("attention_window, _tokens and windowed_layers go together")
        if self.windowed_layers is not None and self.windowed_layers > self.num_layers:
            raise ValueError("windowed_layers exceeds num_layers")
        if self.active_params_b > self.total_params_b * 1.0001:
            raise ValueError("active_params_b exceeds total_params_b")
        if "none" in self.quantized_checkpoints:
            raise ValueError("quantized_checkpoints has no 'none' format")
        return self

    def _check_mla(self) -> None:
        mla = {
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "v_head_dim": self.v_head_dim,
        }
        if self.attention == "gqa":
            extra = [k for k, v in mla.items() if v is not None]
            if extra or self.q_lora_rank is not None:
                raise ValueError(f"GQA model sets MLA fields: {extra or ['q_lora_rank']}")
            return
        missing = [k for k, v in mla.items() if v is None]
        if missing:
            raise ValueError(f"MLA model lacks {', '.join(missing)}")
        if self.head_dim != (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0):
            raise ValueError("MLA head_dim must equal qk_nope_head_dim + qk_rope_head_dim")

    def _check_moe(self) -> None:
        if (self.num_experts is None) != (self.experts_per_token is None):
            raise ValueError("num_experts and experts_per_token go together")
        if self.num_experts is None:
            if self.moe_intermediate_size or self.num_shared_experts or self.num_dense_layers:
                raise ValueError("dense model sets MoE fields")
            if abs(self.active_params_b - self.total_params_b) > 1e-9:
                raise ValueError("dense model: active_params_b must equal total_params_b")
            return
        if (self.experts_per_token or 0) > self.num_experts:
            raise ValueError("experts_per_token exceeds num_experts")
        if self.moe_intermediate_size is None:
            raise ValueError("MoE model lacks moe_intermediate_size")
        if self.num_dense_layers >= self.num_layers:
            raise ValueError("num_dense_layers must leave at least one MoE layer")

    @property
    def is_moe(self) -> bool:
        """True when the MLP is a routed mixture of experts."""
        return self.num_experts is not None

    def dense_share(self) -> float:
        """Share of the body weights every token reads: 1 for a dense model; for MoE the
        non-expert part (attention, shared experts, dense layers, router), derived from the
        published active and total counts. active = dense + (total - dense)·k/E, so
        dense/total = (active/total - k/E) / (1 - k/E). (Taking active/total itself as the
        dense share counted the k routed experts twice: 1.6-1.7x the active weights read at
        one token for gpt-oss-120b and Qwen3-235B-A22B.)"""
        if not self.is_moe:
            return 1.0
        routed = (self.experts_per_token or 1) / (self.num_experts or 1)
        active = self.active_params_b / self.total_params_b
        return min(1.0, max(0.0, (active - routed) / (1.0 - routed))) if routed < 1 else 1.0

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> float:
        """KV-cache bytes one token occupies across all layers, at full attention.

        GQA: 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes.
        MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype_bytes (one latent, all heads).
        Windowed layers (sliding/chunked) are counted in full: this is the per-token cost for
        contexts no longer than the window, and the upper bound beyond it.

        Args:
            dtype_bytes: bytes per cached element (2 for bf16/fp16, 1 for fp8/int8).

        Returns:
            Bytes per token.

        Raises:
            UsageError: if dtype_bytes is not positive.
        """
        if dtype_bytes <= 0:
            raise UsageError(f"dtype_bytes must be positive, got {dtype_bytes}")
        if self.attention == "mla":
            width = (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
            return float(self.num_layers * width * dtype_bytes)
        return float(2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes)


# ---------------------------------------------------------------------------------------------
# Parameter estimate from shapes


def estimate_params_b(spec: ModelSpec) -> tuple[float, float]:
    """Total and per-token active parameters, in billions, from the shapes alone.

    Formula (SwiGLU MLPs, biases ignored):
    embeddings V·H, plus an lm_head V·H unless tied, plus per layer: RMSNorm weights 2·H;
    attention — GQA: H·(heads·d) + 2·H·(kv·d) + (heads·d)·H; MLA: the q path
    (H·q_lora + q_lora·heads·(nope+rope), or H·heads·(nope+rope)), H·(kv_lora+rope),
    kv_lora·heads·(nope+v), heads·v·H; MLP — dense 3·H·I; MoE layer: (routed + shared)
    experts × 3·H·I_moe plus the router H·experts. Active counts experts_per_token routed
    experts instead of all. Vision towers, MTP heads and norms inside attention are left out.

    Args:
        spec: the model's shapes.

    Returns:
        (total_params_b, active_params_b).
    """
    h, heads = spec.hidden_size, spec.num_attention_heads
    if spec.attention == "mla":
        nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0
        v, kv_lora = spec.v_head_dim or 0, spec.kv_lora_rank or 0
        q = (
            h * spec.q_lora_rank + spec.q_lora_rank * heads * (nope + rope)
            if spec.q_lora_rank
            else h * heads * (nope + rope)
        )
        attn = q + h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h
    else:
        d = spec.head_dim
        attn = 2 * h * heads * d + 2 * h * spec.num_kv_heads * d
    dense_mlp = 3 * h * spec.intermediate_size
    embed = spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2)
    norms = 2 * h
    if not spec.is_moe:
        total = embed + spec.num_layers * (attn + dense_mlp + norms)
        return total / 1e9, total / 1e9
    expert = 3 * h * (spec.moe_intermediate_size or 0)
    experts = spec.num_experts or 0
    moe_layers = spec.num_layers - spec.num_dense_layers
    dense_part = spec.num_dense_layers * (attn + dense_mlp + norms)
    shared = spec.num_shared_experts * expert
    total_moe = attn + norms + h * experts + shared + experts * expert
    active_moe = attn + norms + h * experts + shared + (spec.experts_per_token or 0) * expert
    total = embed + dense_part + moe_layers * total_moe
    active = embed + dense_part + moe_layers * active_moe
    return total / 1e9, active / 1e9
