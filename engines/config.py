"""`EngineConfig`: one engine-neutral serving configuration (DESIGN §2.3).

Each `engines/<kind>.py` renders it to that engine's own flags and config file. `None` on a
knob means "leave the engine's default"; the values are validated here so renderers can pass
them on without quoting or escaping.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from core.records import Record

EngineKind = Literal["vllm", "sglang", "trtllm"]
KvCacheDtype = Literal["auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp4"]
WeightQuantization = Literal["none", "fp8", "int8", "int4", "awq", "gptq", "nvfp4", "mxfp4"]
SpeculativeMethod = Literal["ngram", "eagle", "eagle3", "draft_model", "mtp"]
ExtraArgValue = str | int | float | bool

# Long-flag names without the leading dashes: vLLM/SGLang use dashes, TRT-LLM underscores.
_FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# A hostname or an IPv4/IPv6 literal; no spaces or shell syntax.
_HOST = re.compile(r"^[A-Za-z0-9.:_-]+$")
_NEEDS_DRAFT: frozenset[str] = frozenset({"eagle", "eagle3", "draft_model"})
_NUMBER = re.compile(r"^-\d+(\.\d+)?([eE][-+]?\d+)?$")  # argparse reads these as values
# A model is an HF id or a local path: nothing longer than PATH_MAX (bytes) is either. One
# argv element may not exceed Linux's MAX_ARG_STRLEN, or exec fails ("Argument list too long").
MAX_MODEL_BYTES = 4096
MAX_ARG_BYTES = 128 * 1024 - 1
# Draft tokens per step: engines take a handful (vLLM's examples 2-7, SGLang's trees up to
# 64 draft tokens); 100,000,000 was exported as a launch flag.
MAX_SPEC_TOKENS = 64


def unsafe_character(value: str) -> str | None:
    """The first character no argv, YAML or shell rendering carries unchanged, if any: C0 and
    C1 controls (U+0085 is a YAML line break), DEL, and the Unicode line/paragraph separators
    (also YAML line breaks)."""
    for ch in value:
        if unicodedata.category(ch) in {"Cc", "Zl", "Zp"}:
            return f"U+{ord(ch):04X}"
    return None


def model_problem(value: str) -> str | None:
    """Why `value` cannot be a model (HF id or path) on a command line, or None: the reason
    reads after the word "model"."""
    # The model is a positional argv element: a leading dash would read as a flag, and
    # control characters have no place in a path or HF id.
    if value != value.strip() or value.startswith("-"):
        return "must not start with '-' or have surrounding whitespace"
    if (bad := unsafe_character(value)) is not None:
        return f"must not contain control characters ({bad})"
    if len(value.encode()) > MAX_MODEL_BYTES:
        return (f"is {len(value.encode()):,} bytes; an HF id or a path has at most "
                f"{MAX_MODEL_BYTES:,}")
    return None


class SpeculativeConfig(Record):
    """Speculative decoding: how drafts are proposed and how many tokens per step."""

    method: SpeculativeMethod = Field(
        description="Draft proposer: ngram (prompt lookup), eagle/eagle3 (draft heads), "
        "draft_model (a small model of the same family), mtp (the model's own MTP layers).",
    )
    num_tokens: int = Field(ge=1, le=MAX_SPEC_TOKENS,
                            description="Speculative tokens proposed per decode step.")
    draft_model: str | None = Field(
        default=None,
        description="HF id or local path of the draft (eagle, eagle3, draft_model only).",
    )

    @field_validator("draft_model")
    @classmethod
    def _draft_is_one_safe_token(cls, value: str | None) -> str | None:
        # Rendered as the value of a flag (SGLang's --speculative-draft-model-path): a leading
        # dash made `--trust-remote-code` a flag of its own.
        if value is not None and (problem := model_problem(value)) is not None:
            raise ValueError(f"draft_model {problem}")
        return value

    @model_validator(mode="after")
    def _draft_matches_method(self) -> Self:
        if self.method in _NEEDS_DRAFT and not self.draft_model:
            raise ValueError(f"speculative method {self.method!r} needs a draft_model")
        if self.method not in _NEEDS_DRAFT and self.draft_model is not None:
            raise ValueError(f"speculative method {self.method!r} takes no draft_model")
        return self


class DisaggregationConfig(Record):
    """Prefill/decode disaggregation: separate engine instances per phase behind a router."""

    prefill_instances: int = Field(ge=1, description="Engine instances serving prefill.")
    decode_instances: int = Field(ge=1, description="Engine instances serving decode.")


# GPUs one engine instance may span: RecommendRequest's cap on GPUs in all. Past it a typo
# (--tp 1000000000) was predicted and exported as a deployment.
MAX_GPUS_PER_INSTANCE = 1024


class EngineConfig(Record):
    """One serving configuration, engine-neutral; None = the engine's own default."""

    engine: EngineKind = Field(description="Serving framework that runs this config.")
    model: str = Field(min_length=1, description="HF model id or local checkpoint path.")
    tp: int = Field(default=1, ge=1, description="Tensor-parallel size (GPUs per stage).")
    pp: int = Field(default=1, ge=1, description="Pipeline-parallel size (stages).")
    dp: int = Field(
        default=1, ge=1,
        description="Attention data-parallel ranks in one instance: each rank runs attention "
        "for its own sequences and holds their KV cache on `tp` GPUs; the MoE layers then "
        "run expert-parallel over all tp x dp GPUs (DEP). GPUs per instance = tp x pp x dp.",
    )
    ep: int = Field(
        default=1, ge=1,
        description="Expert-parallel size: MoE experts split whole over this many GPUs "
        "(1 = every expert tensor-sharded over tp). 1 or tp x dp: tp with dp = 1 is TEP "
        "(TP attention, experts across the TP group), tp x dp with dp > 1 is DEP.",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="Cap on concurrently running sequences."
    )
    max_batched_tokens: int | None = Field(
        default=None, ge=1, description="Token budget per scheduler step (prefill chunk budget)."
    )
    gpu_memory_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="The engine's own memory fraction knob; not comparable across engines.",
    )
    prefix_caching: bool | None = Field(default=None, description="Reuse KV of shared prefixes.")
    chunked_prefill: bool | None = Field(
        default=None, description="Split long prefills into budget-sized chunks."
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto", description="KV-cache storage dtype; auto = the model's dtype."
    )
    weight_quantization: WeightQuantization | None = Field(
        default=None, description="Weight quantization; None = whatever the checkpoint says."
    )
    speculative: SpeculativeConfig | None = Field(
        default=None, description="Speculative decoding, or None for plain decoding."
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="Max tokens per sequence (prompt + output)."
    )
    disaggregation: DisaggregationConfig | None = Field(
        default=None, description="Prefill/decode disaggregation, or None for one instance."
    )
    extra_args: dict[str, ExtraArgValue] = Field(
        default_factory=dict,
        description="Additional long flags for the engine (name without dashes → scalar).",
    )
    host: str = Field(default="0.0.0.0", description="Interface the server binds.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port the server listens on.")

    @property
    def gpus_per_instance(self) -> int:
        """GPUs one engine instance spans: tp x pp x dp."""
        return self.tp * self.pp * self.dp

    @model_validator(mode="after")
    def _parallelism_is_served(self) -> Self:
        # The layouts the three engines serve MoE models with: TP, TEP (experts over the TP
        # group) and DEP (attention DP + experts over all ranks). Attention DP with
        # tensor-sharded experts, or EP over part of the ranks, is not modelled.
        if self.gpus_per_instance > MAX_GPUS_PER_INSTANCE:
            raise ValueError(f"tp x pp x dp = {self.gpus_per_instance:,} GPUs in one instance: "
                             f"at most {MAX_GPUS_PER_INSTANCE:,} (the recommender's own cap)")
        group = self.tp * self.dp
        if self.ep not in (1, group):
            raise ValueError(f"ep={self.ep} must be 1 or tp x dp = {group} (experts over "
                             "the whole instance)")
        if self.dp > 1 and self.ep != group:
            raise ValueError(f"dp={self.dp} (attention data parallelism) needs ep = tp x dp "
                             f"= {group}: the MoE layers run expert-parallel over all ranks")
        return self

    @field_validator("model")
    @classmethod
    def _model_is_one_safe_token(cls, value: str) -> str:
        if (problem := model_problem(value)) is not None:
            raise ValueError(f"model {problem}")
        return value

    @field_validator("host")
    @classmethod
    def _host_is_plain(cls, value: str) -> str:
        if not _HOST.fullmatch(value):
            raise ValueError("host must be a hostname or IP address")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra_args_are_flags(cls, value: dict[str, ExtraArgValue]) -> dict[str, ExtraArgValue]:
        for key, item in value.items():
            if not _FLAG_NAME.fullmatch(key):
                raise ValueError(
                    f"extra_args key {key!r} is not a long-flag name "
                    "([a-z0-9-_], without leading dashes)"
                )
            if not isinstance(item, str):
                continue
            if (bad := unsafe_character(item)) is not None:
                raise ValueError(f"extra_args[{key!r}] must not contain control characters "
                                 f"({bad})")
            if item.startswith("-") and not _NUMBER.fullmatch(item):
                # Rendered as `--key value`: the engine's parser would read it as a flag.
                raise ValueError(f"extra_args[{key!r}] = {item[:40]!r} starts with '-', which "
                                 "the engine would read as a flag, not as the value")
            if len(item.encode()) > MAX_ARG_BYTES:
                raise ValueError(f"extra_args[{key!r}] is {len(item.encode()):,} bytes; one "
                                 f"command-line argument holds at most {MAX_ARG_BYTES:,}")
        return value
