"""Each engine's scheduler policy, as the simulator runs it: a plug-in per engine kind.

Owns `SchedulerPolicy` (how a replica admits waiting requests and claims KV for them) and
`POLICIES` (engine kind → its policy). The simulator's kernel and the steady-state algebra
read the policy's named fields; no code branches on the engine's name.

- vLLM (V1 scheduler): FCFS, a request claims the KV blocks of its first chunk at
  admission and grows block by block; when none is free the newest running request is
  preempted and recomputed later.
- SGLang: the same admission and recompute preemption in the simulator; its radix cache's
  longest-prefix-match ordering and new-token-ratio admission are not modelled (said here
  rather than approximated).
- TensorRT-LLM (GUARANTEED_NO_EVICT, its default capacity scheduler): a request is admitted
  only when the blocks of its whole prompt + output fit, held to its end, so it is never
  preempted. MAX_UTILIZATION (admit like vLLM, pause on a full pool) is the `grow` policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engines.config import EngineKind

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

    @property
    def reserves_output(self) -> bool:
        """Whether an admitted request holds its whole output's KV from the start."""
        return self.admission == "reserve_full"

    @property
    def resident_output_share(self) -> float:
        """Share of a request's output the steady-state algebra counts resident on average:
        all of it when reserved up front, half when the KV grows as it decodes."""
        return 1.0 if self.reserves_output else 0.5


POLICIES: dict[EngineKind, SchedulerPolicy] = {
    "vllm": SchedulerPolicy("vllm-v1-fcfs", "grow"),
    "sglang": SchedulerPolicy("sglang-fcfs", "grow", cap_per_instance=True),
    "trtllm": SchedulerPolicy("trtllm-guaranteed-no-evict", "reserve_full"),
}

__all__ = ["POLICIES", "Admission", "SchedulerPolicy"]
