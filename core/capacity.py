"""The SLO boundary's records: how far a deployment holds, predicted or measured.

Shared by `recommender.decision.capacity` (which fills them), the engines' export report, the CLI
and the views (which print them, in `core.capacity_text`'s words); seconds and req/s inside.
Besides the records: the comparison of a predicted boundary with a measured one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.records import MutableRecord, Record

# What breaks first as the load grows, read from the simulator's state at the first load
# that fails: the KV pool (preemptions or a full pool), the max_num_seqs cap (running
# sequences at the cap with a queue), the compute (a queue grows while neither binds), or
# prefill interference (TPOT breaks with no queue: decode steps stretched by prefills);
# "none" where the load holds.
Limit = Literal["kv_capacity", "compute", "max_num_seqs", "prefill_interference", "none"]


class LoadPoint(Record):
    """One simulated load: the trace's arrivals compressed `multiple` times."""

    multiple: float = Field(gt=0, description="Load over today's (1 = the trace's own rate).")
    rate_rps: float = Field(ge=0, description="Offered requests/s at this load.")
    ttft_p95_s: float | None = Field(description="Predicted p95 TTFT (None: none served).")
    tpot_p95_s: float | None = Field(description="Predicted p95 TPOT (None: none served).")
    holds: bool = Field(description="SLOs met and the load kept up with.")


# Mutable: prices are filled in afterwards, when a GPU price is known
# (recommender.decision.capacity.pricing).
class Boundary(MutableRecord):
    """The highest load one deployment serves within the SLOs (a bracketing search)."""

    label: str = Field(description="The candidate's short description.")
    engine: str
    replicas: int = Field(ge=1)
    gpus: int = Field(ge=1)
    rate_rps: float = Field(ge=0, description="Highest load found to hold, req/s (0: not even "
                            "the search's smallest load holds).")
    rate_low_rps: float | None = Field(default=None, ge=0, description="Band: rate_rps less "
                                       "the prediction's cross-validated error.")
    rate_high_rps: float | None = Field(default=None, ge=0, description="Band: rate_rps plus "
                                        "the prediction's cross-validated error.")
    multiple_of_mean: float = Field(ge=0, description="rate_rps over the trace's mean rate.")
    multiple_of_peak: float | None = Field(description="rate_rps over the trace's peak rate.")
    binding: Limit = Field(description="What breaks first just past the boundary.")
    capped: bool = Field(default=False, description="Still holds at the search's largest "
                         "load: the boundary is at least rate_rps.")
    simulations: int = Field(ge=0, description="Simulations the search ran.")
    usd_per_mtok: float | None = Field(default=None, ge=0, description="USD per million "
                                       "output tokens served at the boundary (None: no price).")


# Mutable: prices are filled in afterwards, when a GPU price is known
# (recommender.decision.capacity.pricing).
class GrowthRow(MutableRecord):
    """What `factor` × today's traffic needs."""

    factor: float = Field(gt=0)
    rate_rps: float = Field(ge=0, description="today's rate × factor.")
    pick_replicas: int | None = Field(description="Replicas of the pick that hold it (None: "
                                      "more than the search tries).")
    pick_gpus: int | None
    binding: Limit = Field(description="What breaks first for today's deployment at this "
                           "load ('none': it still holds).")
    alternative: str | None = Field(default=None, description="Cheapest other engine's best "
                                    "that holds it (fewest GPUs).")
    alternative_gpus: int | None = None
    usd_per_mtok: float | None = Field(default=None, ge=0, description="USD per million "
                                       "output tokens of the pick's GPUs at this load.")


class LoadCurve(Record):
    """Predicted p95 TTFT/TPOT of one deployment against load, with what to mark on the
    chart."""

    label: str = Field(default="", description="The deployment's short description ('' in "
                       "recommendations stored before curves were labelled: the pick).")
    points: list[LoadPoint] = Field(description="The search's loads, lightest first.")
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    mean_rps: float = Field(ge=0, description="The trace's mean rate.")
    peak_rps: float | None = Field(description="The trace's peak rate.")
    boundary_rps: float = Field(ge=0)


class DayWindow(Record):
    """One window of the trace's arrivals and the replicas of the pick it needs."""

    t_s: float = Field(ge=0, description="Window start, seconds from the trace's first request.")
    duration_s: float = Field(gt=0)
    rate_rps: float = Field(ge=0, description="The window's mean arrival rate.")
    replicas: int = Field(ge=1, description="Replicas of the pick that hold that rate.")
    gpus: int = Field(ge=1)
    headroom: float | None = Field(description="What those replicas hold over the window's "
                                   "rate (None: no request in the window).")


# Mutable: prices are filled in afterwards, when a GPU price is known
# (recommender.decision.capacity.pricing).
class DayPlan(MutableRecord):
    """The fleet over the trace's span: replicas per window at the pick's SLO boundary, the
    GPU-hours that costs against a fleet sized for the busiest window, and the headroom."""

    window_s: float = Field(gt=0)
    per_replica_rps: float = Field(gt=0, description="The pick's boundary over its replicas.")
    windows: list[DayWindow]
    gpu_hours: float = Field(ge=0, description="Sum over windows of GPUs x hours.")
    peak_fleet_gpus: int = Field(ge=1, description="GPUs of a fleet sized for the busiest "
                                 "window, kept all day.")
    peak_fleet_gpu_hours: float = Field(ge=0)
    usd: float | None = Field(default=None, ge=0, description="What the planned GPU-hours "
                              "cost (None: no price).")
    peak_fleet_usd: float | None = Field(default=None, ge=0)
    min_headroom: float | None = Field(description="The least headroom of any window.")
    method: str = Field(description="How the plan was made, in words.")


# Mutable: the day plan is added once the pick is known (recommender.decision.recommend).
class Capacity(MutableRecord):
    """How far the pick holds, each engine's best alternative, and what growth needs."""

    today_rps: float = Field(ge=0, description="The simulated window's own rate (1×).")
    mean_rps: float = Field(ge=0, description="The trace's mean arrival rate.")
    peak_rps: float | None = Field(description="The trace's peak rate (busiest "
                                   "`peak_window_s`), None when the trace is too short.")
    peak_window_s: float | None = None
    slo_ttft_s: float | None = Field(gt=0, description="The p95 TTFT limit held: the SLO, "
                                     "or the sane limit when no SLO is given; None: unlimited.")
    slo_tpot_s: float | None = Field(gt=0, description="The p95 TPOT limit held, likewise.")
    pick: Boundary
    alternatives: list[Boundary] = Field(description="Each other engine's best candidate.")
    growth: list[GrowthRow]
    curve: LoadCurve
    alternative_curves: list[LoadCurve] = Field(
        default_factory=list, description="Each other engine's best against load, from its "
        "own boundary search (empty in recommendations stored before they were kept).")
    method: str = Field(description="How the boundary was found, in words.")
    day: DayPlan | None = Field(default=None, description="The fleet over the trace's span "
                                "(None: no arrival times, or the pick holds no load).")


class BoundaryDelta(Record):
    """A predicted boundary against the one measured on a live endpoint."""

    predicted_rps: float = Field(ge=0)
    measured_rps: float = Field(ge=0)
    error: float | None = Field(description="(predicted − measured) / measured; None when "
                                "nothing held in the measurement.")
    within_band: bool | None = Field(description="The measurement inside the predicted band "
                                     "(None: no band).")


def compare_boundary(predicted: Boundary, measured_rps: float) -> BoundaryDelta:
    """The relative error of `predicted` against `measured_rps`, and whether the band holds it."""
    error = (predicted.rate_rps - measured_rps) / measured_rps if measured_rps > 0 else None
    within = None
    if predicted.rate_low_rps is not None and predicted.rate_high_rps is not None:
        within = predicted.rate_low_rps <= measured_rps <= predicted.rate_high_rps
    return BoundaryDelta(predicted_rps=predicted.rate_rps, measured_rps=measured_rps,
                         error=error, within_band=within)
