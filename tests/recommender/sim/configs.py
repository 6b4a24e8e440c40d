"""The Llama-3.1-8B-on-one-H100 configs the simulator's tests run: the engine config with a
small prefill budget, and one whose KV pool holds just a given number of tokens (preemption and
eviction tests)."""

from __future__ import annotations

import numpy as np

from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.memory import plan_memory

GPU = get_gpu("H100-SXM")
MODEL = get_model("llama-3.1-8b")


def engine_config(engine: str = "vllm", **kw) -> EngineConfig:
    """`engine` serving MODEL, chunked prefill on with a 1024-token budget unless given."""
    kw.setdefault("max_batched_tokens", 1024)
    kw.setdefault("chunked_prefill", True)
    return EngineConfig(engine=engine, model=MODEL.name, **kw)  # type: ignore[arg-type]


def small_kv(target: int, engine: str = "vllm", **kw) -> EngineConfig:
    """A config whose KV pool holds just >= target tokens (max_model_len = target)."""
    for f in np.arange(0.2, 0.6, 0.002):
        cfg = engine_config(engine=engine, gpu_memory_fraction=float(f), max_model_len=target,
                            **kw)
        if plan_memory(cfg, GPU, MODEL).kv_capacity_tokens >= target:
            return cfg
    raise AssertionError("no fraction found")
