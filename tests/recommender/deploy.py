"""The tests' shorthand for an `EngineConfig` of a catalog model (precision names as the CLI
takes them)."""

from __future__ import annotations

from engines.config import EngineConfig, SpeculativeConfig
from recommender.perf import weight_quantization
from recommender.specs import ModelSpec


def deploy(engine: str, model: ModelSpec, *, tp: int = 1, precision: str = "bf16",
           kv_cache_dtype: str = "auto", max_num_seqs: int | None = None,
           max_batched_tokens: int | None = None,
           speculative: SpeculativeConfig | None = None) -> EngineConfig:
    return EngineConfig(engine=engine, model=model.name, tp=tp,  # type: ignore[arg-type]
                        weight_quantization=weight_quantization(precision),
                        kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
                        max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
                        speculative=speculative)
