"""Which requests one replica of an engine config can never serve, and why: beyond
max_model_len, beyond the step token budget with chunked prefill off, or more KV cache than
the pool holds (`servable`, `unservable_counts`, `refusal_reason`). `simulate`
(`recommender.sim.simulator`) rejects requests by these rules. No I/O.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from core.errors import UsageError
from engines.config import EngineConfig
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import SchedulerCaps, scheduler_caps
from recommender.model.memory import MemoryPlan, plan_memory


def servable(worst: np.ndarray, cap_blocks: int, unit: int, *, max_len: int | None,
             budget: int, chunked: bool) -> np.ndarray:
    """Which requests of `worst` = prompt + output − 1 tokens an engine can ever serve: their
    KV blocks fit the pool, prompt + output within max_model_len, and with chunked prefill
    off within one step's token budget (the rules `refusal_reason` words)."""
    ok = (-(-worst // unit) <= cap_blocks) & (worst + 1 <= (max_len or np.inf))
    if not chunked:
        ok &= worst <= budget
    return ok


UnservableRule = Literal["max_model_len", "budget", "kv_pool"]


def _refusals(config: EngineConfig, gpu: GPU, model: ModelSpec, tokens: np.ndarray,
              kv_block_tokens: int
              ) -> tuple[dict[UnservableRule, np.ndarray], SchedulerCaps, MemoryPlan]:
    """({rule: mask} of the `tokens` = prompt + output requests one replica of `config` can
    never serve, each under the first rule that refuses it: beyond max_model_len, beyond
    the step token budget with chunked prefill off, more KV cache than the pool holds;
    the scheduler caps; the memory plan).

    Raises:
        UsageError: a config that does not fit in memory.
    """
    caps = scheduler_caps(config, gpu)
    plan = plan_memory(config, gpu, model, block_size_tokens=kv_block_tokens)
    if not plan.fits:
        raise UsageError("; ".join(r.reason for r in plan.risks if r.blocking))
    bad = ~servable(tokens - 1, plan.kv_capacity_blocks, kv_block_tokens,
                     max_len=config.max_model_len, budget=caps.budget_tokens,
                     chunked=caps.chunked_prefill)
    too_long = bad & (tokens > (config.max_model_len or np.inf))
    budget = bad & ~too_long & (not caps.chunked_prefill) & (tokens - 1 > caps.budget_tokens)
    rules: dict[UnservableRule, np.ndarray] = {
        "max_model_len": too_long, "budget": budget, "kv_pool": bad & ~too_long & ~budget}
    return rules, caps, plan


def unservable_counts(config: EngineConfig, gpu: GPU, model: ModelSpec,
                      input_tokens: np.ndarray, output_tokens: np.ndarray, *,
                      kv_block_tokens: int = 16) -> dict[UnservableRule, int]:
    """{rule: requests} of the requests one replica of `config` can never serve, each
    counted under the first rule that refuses it (`refusal_reason`'s rules). Empty when
    every request can be served.

    Raises:
        UsageError: a config that does not fit in memory.
    """
    tokens = np.asarray(input_tokens, dtype=np.int64) + np.asarray(output_tokens, np.int64)
    rules, _, _ = _refusals(config, gpu, model, tokens, kv_block_tokens)
    return {k: int(mask.sum()) for k, mask in rules.items() if mask.any()}


def refusal_reason(
    config: EngineConfig, gpu: GPU, model: ModelSpec, isl: int, osl: int, *,
    kv_block_tokens: int = 16,
) -> str | None:
    """Why one `isl`+`osl`-token request can never be served by one replica of `config`
    (the rules `simulate` rejects requests by), or None when it can.

    Raises:
        UsageError: a config that does not fit in memory.
    """
    rules, caps, plan = _refusals(config, gpu, model, np.array([isl + osl]), kv_block_tokens)
    rule = next((k for k, mask in rules.items() if mask[0]), None)
    if rule == "max_model_len":
        return (f"a {isl}+{osl}-token request exceeds max_model_len {config.max_model_len}; "
                "raise --max-model-len or shorten the request")
    if rule == "budget":
        return (f"a {isl}+{osl}-token request exceeds the step token budget "
                f"{caps.budget_tokens} with chunked prefill off; raise --max-batched-tokens")
    if rule == "kv_pool":
        return (f"a {isl}+{osl}-token request needs more KV cache than a replica holds "
                f"({plan.kv_capacity_tokens} tokens); add GPUs, quantize, or shorten the "
                "request")
    return None
