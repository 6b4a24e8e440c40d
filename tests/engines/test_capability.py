"""Tests for engines/capability.py: expert parallelism never over more GPUs than the model
has experts (Mixtral's 8 experts at ep=16 was exported)."""

from __future__ import annotations

import pytest

from engines.capability import check_parallelism
from engines.config import EngineConfig
from engines.errors import CapabilityError
from engines.facts import HardwareFacts, ModelFacts

H100x16 = HardwareFacts(gpu_name="H100-SXM", compute_capability=(9, 0),
                        native_dtypes=frozenset({"bf16", "fp8"}), gpu_count=16,
                        memory_per_gpu_gib=80.0)
MIXTRAL = ModelFacts(num_attention_heads=32, num_kv_heads=8, num_layers=32,
                     max_context_tokens=32768, is_moe=True, num_experts=8)


def test_ep_beyond_the_experts_is_refused() -> None:
    config = EngineConfig(engine="vllm", model="m", tp=16, ep=16)
    with pytest.raises(CapabilityError, match="ep=16 exceeds the model's 8 experts"):
        check_parallelism(config, H100x16, MIXTRAL, kv_heads_must_divide=True)


def test_ep_up_to_the_experts_passes() -> None:
    for tp in (2, 8):
        check_parallelism(EngineConfig(engine="vllm", model="m", tp=tp, ep=tp), H100x16,
                          MIXTRAL, kv_heads_must_divide=True)
    # unknown expert count: only the MoE rule applies
    unknown = MIXTRAL.model_copy(update={"num_experts": None})
    check_parallelism(EngineConfig(engine="vllm", model="m", tp=16, ep=16), H100x16, unknown,
                      kv_heads_must_divide=True)
