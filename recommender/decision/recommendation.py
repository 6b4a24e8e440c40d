"""The recommendation's records: what `recommend` takes (`RecommendRequest`) and returns.

Typed, `extra="forbid"`, seconds internally. A `Recommendation` holds each simulated
candidate once, in `candidates`; the pick and each engine's best are indices into it. Its
export view is built from the pick on demand (`recommender.decision.export_view`). No logic
beyond field validation, and `read_recommendation`, which refuses the shape saved before.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from core.capacity import Capacity
from core.errors import UsageError
from core.figures import ServingFigures
from core.load import MAX_RATE_RPS, MIN_RATE_RPS
from core.records import MutableRecord, Record
from engines.config import EngineConfig, SpeculativeMethod
from recommender.catalog.specs import GpuPrice

Objective = Literal["goodput", "latency", "cost"]
# What each objective ranks by, in the words the front ends show (one entry per Objective).
OBJECTIVES: dict[Objective, str] = {
    "goodput": "most requests/s within the SLOs",
    "latency": "lowest latency",
    "cost": "lowest $ per million output tokens at the SLO boundary",
}


class RecommendRequest(Record):
    """What to recommend for: a trace (or profile.json), hardware, model, SLOs, objective."""

    source: str = Field(min_length=1, description="Trace file, or a profile.json.")
    gpu: str = Field(min_length=1, description="Catalog GPU name, e.g. 'H100-SXM'.")
    gpus: int = Field(default=1, ge=1, le=1024, description="GPUs available in total.")
    model: str = Field(min_length=1, description="Catalog model name or config.json path.")
    slo_ttft_p95_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                         description="p95 TTFT SLO, s.")
    slo_tpot_p95_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                         description="p95 TPOT SLO, s.")
    objective: Objective = Field(default="goodput", description="What the ranking maximises.")
    max_requests: int = Field(
        default=20_000, ge=100, description="Cap on requests in the simulated window."
    )
    seed: int = Field(default=0, description="Seed of every random choice.")
    arrival_rate_rps: float | None = Field(
        default=None, ge=MIN_RATE_RPS, le=MAX_RATE_RPS, allow_inf_nan=False,
        description="Poisson arrivals at this rate for a source without "
        "timestamps (ShareGPT-style traces, profiles without arrival times); else unused.")
    gpu_price_per_hour_usd: float | None = Field(
        default=None, gt=0, le=10_000, description="USD per GPU-hour for the $/Mtok figures "
        "(None: the catalog's public on-demand list price).")
    spec_acceptance: dict[SpeculativeMethod, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict, description="Per-token speculative acceptance measured on the "
        "user's own deployment, by method (a validation run's engine counters: the bench "
        "report's `scraped.speculative.acceptance`); overrides the trace's replay and the "
        "published defaults.")


class PredictedMetrics(ServingFigures):
    """Predicted serving figures of one candidate over all its replicas (latencies from the
    simulated requests, ITL pooled over every emission gap; None where nothing completed),
    with the candidate's KV headroom and SLO verdict, and the error band of its calibration
    cell (a trace replay counts as the closed-loop regime at its mean occupancy:
    `recommender.calibration.cells.replay_regime`)."""

    kv_headroom_fraction: float = Field(
        description="Share of the KV pool still free at the busiest simulated moment."
    )
    slo_met: bool = Field(description="p95 TTFT and p95 TPOT within the SLOs (True: no SLO).")
    rejected_requests: int = Field(default=0, ge=0,
                                   description="Simulated requests that can never be served.")
    preemptions: int = Field(default=0, ge=0, description="Recompute preemptions simulated.")
    calibration_cell: str | None = Field(
        default=None, description="The calibration cell "
        "(`recommender.calibration.cells.cell_of`) the prediction falls in, calibrated or "
        "not; `band` carries that cell's cross-validated "
        "error and its coverage (`band.rows` held-out measurements), None when no published "
        "measurement covers the cell.")


# Mutable: prices are filled in afterwards, when a GPU price is known
# (recommender.decision.capacity.pricing).
class Candidate(MutableRecord):
    """One simulated configuration with its figures and ranking."""

    config: EngineConfig
    label: str = Field(description="Short human description of the knobs that differ.")
    predicted: PredictedMetrics
    score: float = Field(description="Objective score (higher is better).")
    feasible: bool = Field(description="Keeps up with the load (and meets SLOs when required).")
    pareto: bool = Field(description="On the goodput / p95 latency Pareto front.")
    rejected_reason: str | None = Field(default=None, description="Why it is not feasible.")
    replicas: int = Field(default=1, ge=1, description="Data-parallel copies (GPUs / tp).")
    usd_per_mtok: float | None = Field(default=None, ge=0, description="USD per million "
                                       "output tokens at today's load (None: no price).")


class Reason(Record):
    """One explanation, tied to the profile or prediction figure that motivates it."""

    text: str
    figure: str = Field(description="Profile or prediction field name, e.g. 'input_tokens.p99'.")
    value: float | None = Field(description="That figure's value.")


# The warning code of a pick that cannot serve the window (front ends and REPORT.md lead
# with it).
UNSERVABLE = "unservable"


class RecWarning(Record):
    """A caveat: outside calibration, OOM risk, SLO unattainable, synthetic workload, ..."""

    code: str
    text: str


TieRule = Literal["figure", "headroom", "fewer_gpus", "calibrated", "simpler", "order",
                  "infeasible"]


class Decision(Record):
    """How the pick was chosen among each engine's best candidate
    (`recommender.decision.decide`)."""

    objective: Objective
    pick: str = Field(description="The picked candidate's label.")
    ranked_by: str = Field(description="The figure the objective ranks by, in words.")
    figures: dict[str, float] = Field(description="That figure per contender label (goodput: "
                                      "req/s per GPU at the SLO boundary; latency: seconds; "
                                      "cost: the score).")
    tied_with: list[str] = Field(description="Labels tied with the pick within the "
                                 "prediction's error (empty: a clear lead).")
    rule: TieRule = Field(description="What decided: `figure` (a clear lead), the "
                          "tie-break that set the pick apart, or `infeasible` (nothing holds "
                          "today's load: the search's score order).")
    runner_up: str | None = Field(default=None, description="The best other engine's "
                                  "contender (None: no other engine contends).")
    confidence: float | None = Field(
        default=None, ge=0, le=1, description="P(the pick beats the runner-up on the figure) "
        "with each figure's error drawn from its cross-validated errors (seeded Monte Carlo, "
        "independent errors); None without an interval on either side.")
    text: str = Field(description="The decision in one sentence.")


class RoutedDeployment(Record):
    """One deployment of a routing plan and the share of traffic it serves."""

    segments: list[int] = Field(description="Profile segment indices routed here.")
    criteria: str = Field(description="Routing rule, e.g. 'input_tokens >= 1800'.")
    share: float = Field(ge=0, le=1, description="Share of requests routed here.")
    gpus: int = Field(ge=1, description="GPUs of this deployment.")
    config: EngineConfig
    predicted: PredictedMetrics


class RoutingPlan(Record):
    """Two deployments each serving part of the traffic, when that beats one."""

    deployments: list[RoutedDeployment]
    gain_text: str


# Mutable: built in stages (decision, capacity, prices) by recommender.decision.recommend.
class Recommendation(MutableRecord):
    """The pick, its alternatives and every simulated candidate, with the why and caveats."""

    request: RecommendRequest
    gpu: str
    gpus: int
    model: str
    candidates: list[Candidate] = Field(description="All candidates simulated on the window.")
    pick_index: int = Field(ge=0, description="The pick's index in `candidates`.")
    alternative_indices: list[int] = Field(description="Indices in `candidates` of each "
                                           "engine's best candidate, ranked (the pick first).")
    reasons: list[Reason]
    warnings: list[RecWarning]
    routing: RoutingPlan | None
    window: str = Field(description="What part of the trace was simulated, and how.")
    search_time_s: float
    candidates_simulated: int = Field(default=0, ge=0,
                                      description="Simulations run (all search stages).")
    decision: Decision | None = Field(
        default=None, description="How the pick was chosen among each engine's best: the "
        "ranking figure, ties within the error and the rule that broke them (None in "
        "recommendations stored before it existed).")
    gpu_price: GpuPrice | None = Field(default=None, description="The GPU-hour price the "
                                       "$/Mtok figures use, with its source.")
    capacity: Capacity | None = Field(
        default=None, description="How far the pick (and each engine's best) holds: the SLO "
        "boundary with its band, as multiples of the trace's mean and peak rate, the growth "
        "table and the load curve (None in recommendations stored before it existed).")

    @model_validator(mode="after")
    def _indices_in_range(self) -> Self:
        n = len(self.candidates)
        wrong = [i for i in [self.pick_index, *self.alternative_indices] if not 0 <= i < n]
        if wrong:
            raise ValueError(f"candidate index {wrong[0]} out of range: {n} candidates")
        return self

    @property
    def pick(self) -> Candidate:
        """The picked candidate."""
        return self.candidates[self.pick_index]

    @property
    def alternatives(self) -> list[Candidate]:
        """Each engine's best candidate, ranked (the pick first)."""
        return [self.candidates[i] for i in self.alternative_indices]


def read_recommendation(data: dict[str, Any]) -> Recommendation:
    """A saved Recommendation from its JSON object.

    Raises:
        UsageError: one saved before the pick became an index into `candidates` (its pick and
            export stored whole): re-running `recommend` saves it again.
        ValidationError: any other invalid field.
    """
    if "pick_index" not in data and ("pick" in data or "export" in data):
        raise UsageError("a Recommendation saved by an older ServeFit (its pick stored whole, "
                         "not as `pick_index`): re-run `recommend` to save it again")
    return Recommendation.model_validate(data)
