"""What a search runs for: the target (GPU, model, GPU count, the facts the plug-ins check and
the performance parameters) and the goals (the objective, the p95 SLOs and the measured
speculative acceptance), with the simulator options every trial takes from them.

Without SLOs, the goals stand in the "sane" per-request limits (SANE_TTFT_S, SANE_TPOT_S).
How a candidate is scored against the goals is `scoring`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engines.facts import HardwareFacts, ModelFacts
from recommender.catalog.specs import GPU, ModelSpec
from recommender.decision.recommendation import Objective
from recommender.model.params import PerfParams
from recommender.sim.simulator import SimOptions

# Without SLOs, goodput counts requests within these "sane" per-request limits (stated in
# the recommendation's window text): a first token within 5 s, at least 10 tokens/s after it.
SANE_TTFT_S = 5.0
SANE_TPOT_S = 0.1


@dataclass(frozen=True, slots=True)
class Target:
    """The hardware and model a search runs for, and the facts the plug-ins check."""

    gpu: GPU
    model: ModelSpec
    gpus: int
    hardware: HardwareFacts
    model_facts: ModelFacts
    params: PerfParams


@dataclass(frozen=True, slots=True)
class Goals:
    """What a candidate must meet and what the ranking maximises, and the speculative
    acceptance measured on the trace (by method) that every simulation of the search takes."""

    objective: Objective
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    measured_acceptance: dict[str, float] = field(default_factory=dict)

    @property
    def has_slo(self) -> bool:
        return self.slo_ttft_s is not None or self.slo_tpot_s is not None

    def sim_options(self) -> SimOptions:
        measured = dict(self.measured_acceptance)
        if self.has_slo:
            return SimOptions(slo_ttft_s=self.slo_ttft_s, slo_tpot_s=self.slo_tpot_s,
                              spec_acceptance_by_method=measured)
        return SimOptions(slo_ttft_s=SANE_TTFT_S, slo_tpot_s=SANE_TPOT_S,
                          spec_acceptance_by_method=measured)
