"""The loop's settings arrays: the integer settings (`ICFG_FIELDS`, named in
`simulator.KernelSettings`) and the scheduler policy's floats (`PCFG_FIELDS`, named in
`policies.SchedulerPolicy`), with their slots.
"""

from __future__ import annotations

# The loop's integer settings (`simulator.KernelSettings`, named there), in this order.
ICFG_FIELDS = ("max_seqs", "budget", "chunked", "static", "closed_concurrency", "cap_units",
               "unit_tokens", "hash_block_tokens", "reserve_output", "decode_runs")
(I_SEQS, I_BUDGET, I_CHUNKED, I_STATIC, I_CLOSED, I_CAP, I_UNIT, I_HASH, I_RESERVE,
 I_DECODE_RUNS) = range(len(ICFG_FIELDS))
# The scheduler policy's floats (`simulator.policy_settings`, named in
# `policies.SchedulerPolicy`), in this order: SGLang-style admission reserve (a running
# request holds back reserve × its remaining output, up to RES_CLIP tokens; the reserve
# starts at RES_INIT, falls by RES_DECAY per step to RES_MIN, and returns to RES_INIT on a
# preemption), and longest-prefix-match ordering of the waiting queue while it holds at
# most LPM_MAX_QUEUE requests (0: FCFS); PREFILL_FIRST 1: a step that can admit waiting
# prompts runs only them.
PCFG_FIELDS = ("reserve_init", "reserve_min", "reserve_decay", "reserve_clip_tokens",
               "lpm_max_queue", "prefill_first")
RES_INIT, RES_MIN, RES_DECAY, RES_CLIP, LPM_MAX_QUEUE, PREFILL_FIRST = range(len(PCFG_FIELDS))
