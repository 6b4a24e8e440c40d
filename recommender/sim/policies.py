"""Each engine's scheduler policy, as the simulator runs it: a plug-in per engine kind.

Owns `SchedulerPolicy` (how a replica admits waiting requests and claims KV for them) and
`POLICIES` (engine kind → its policy). The simulator's kernel and the steady-state algebra
read the policy's named fields; no code branches on the engine's name.

- vLLM (V1 scheduler): FCFS, a request claims the KV blocks of its first chunk at
  admission and grows block by block; when none is free the newest running request is
  preempted and recomputed later. The V0 scheduler (releases before 0.8) without chunked
  prefill puts prompts first: a step that can start waiting prompts runs only them, and the
  running requests decode in the steps between (`prefill_first`).
- SGLang: FCFS (the default schedule policy since 0.5; `--schedule-policy lpm` in
  extra_args orders the waiting queue by longest cached prefix while it holds at most 128
  requests, as SGLang does), admission by new-token ratio (a running request holds back
  ratio × its remaining output, clipped at 4,096 tokens; the ratio starts at 0.7, decays to
  0.098 over 600 steps and returns to 0.7 after a retraction), recompute on retraction.
- TensorRT-LLM (GUARANTEED_NO_EVICT, its default capacity scheduler): a request is admitted
  only when the blocks of its whole prompt + output fit, held to its end, so it is never
  preempted. MAX_UTILIZATION (admit like vLLM, pause on a full pool) is the `grow` policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from engines.config import EngineConfig, EngineKind
from engines.vllm.plugin import runs_v0

Admission = Literal["grow", "reserve_full"]


@dataclass(frozen=True, slots=True)
class SchedulerPolicy:
    """How one engine's scheduler admits and holds KV."""

    name: str
    admission: Admission  # grow: first chunk's blocks, then as it decodes; reserve_full: all
    # The running-sequence cap (max_num_seqs) counts the whole instance, divided over its
    # attention DP ranks (SGLang's --max-running-requests), rather than each rank (vLLM's
    # --max-num-seqs, TensorRT-LLM's max_batch_size).
    cap_per_instance: bool = False
    # Admission reserve for the running requests' remaining outputs (SGLang's new-token
    # ratio): ratio at start / floor / decay per step, and the per-request clip in tokens.
    reserve_init: float = 0.0
    reserve_min: float = 0.0
    reserve_decay: float = 0.0
    reserve_clip_tokens: int = 4096
    lpm_max_queue: int = 0  # longest-prefix-match ordering up to this queue length; 0 FCFS
    # A step that can admit waiting prompts runs only prompts (the running requests decode
    # in the steps between), rather than decodes first and prompts in the budget left.
    prefill_first: bool = False

    @property
    def reserves_output(self) -> bool:
        """Whether an admitted request holds its whole output's KV from the start."""
        return self.admission == "reserve_full"

    @property
    def resident_output_share(self) -> float:
        """Share of a request's output the steady-state algebra counts resident on average:
        all of it when reserved up front, half when the KV grows as it decodes."""
        return 1.0 if self.reserves_output else 0.5


SGLANG_RATIO = (0.7, 0.7 * 0.14, 600)  # SGLANG_INIT_NEW_TOKEN_RATIO, x MIN_FACTOR, DECAY_STEPS
SGLANG_LPM_MAX_QUEUE = 128  # SchedulePolicy: past this queue length LPM falls back to FCFS


def _vllm(config: EngineConfig, release: tuple[int, int] | None) -> SchedulerPolicy:
    # V0's Scheduler._schedule_default: prefills first, decodes only in a step with none;
    # with chunked prefill V0 schedules decodes first, as V1 always does.
    if runs_v0(release) and config.chunked_prefill is False:
        return SchedulerPolicy("vllm-v0-prefill-first", "grow", prefill_first=True)
    return SchedulerPolicy("vllm-v1-fcfs", "grow")


def _sglang(config: EngineConfig, release: tuple[int, int] | None) -> SchedulerPolicy:
    del release
    init, floor, steps = SGLANG_RATIO
    lpm = str(config.extra_args.get("schedule-policy", "fcfs")) == "lpm"
    return SchedulerPolicy(
        "sglang-lpm" if lpm else "sglang-fcfs", "grow", cap_per_instance=True,
        reserve_init=init, reserve_min=floor, reserve_decay=(init - floor) / steps,
        lpm_max_queue=SGLANG_LPM_MAX_QUEUE if lpm else 0)


def _trtllm(config: EngineConfig, release: tuple[int, int] | None) -> SchedulerPolicy:
    del config, release
    return SchedulerPolicy("trtllm-guaranteed-no-evict", "reserve_full")


POLICIES: dict[EngineKind, Callable[[EngineConfig, tuple[int, int] | None], SchedulerPolicy]] = {
    "vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm,
}


def policy_for(config: EngineConfig, release: tuple[int, int] | None = None) -> SchedulerPolicy:
    """The scheduler policy `config`'s engine runs it with, in its (major, minor) `release`
    (None: the plug-in's)."""
    return POLICIES[config.engine](config, release)


__all__ = ["POLICIES", "Admission", "SchedulerPolicy", "policy_for"]
