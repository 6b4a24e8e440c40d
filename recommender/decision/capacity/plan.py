"""The capacity plan: how far the pick and its alternatives hold, and growth.

Owns the plan a recommendation carries (`core.capacity.Capacity`): the pick's boundary and
each alternative's, the growth table (replicas of the pick for 2×/5×/10× today's traffic,
found from the boundary's linear estimate and checked by simulation, and the cheapest other
engine that holds it) and the load curves the front ends chart. The boundary search is
`boundary`'s. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from core.capacity import Boundary, Capacity, GrowthRow, LoadCurve, LoadPoint
from recommender.decision.capacity.boundary import (
    RESOLUTION,
    BoundarySearch,
    TraceRates,
    boundary_of,
    search_boundary,
)
from recommender.decision.capacity.trial import Setting, SizedDeployment, holds_at

GROWTH_FACTORS = (2.0, 5.0, 10.0)
MAX_REPLICAS = 4096
REPLICA_TRIES = 8


def replicas_needed(setting: Setting, dep: SizedDeployment, factor: float, *,
                    boundary_multiple: float) -> int | None:
    """Fewest replicas of `dep` that hold `factor` × today's load: start from the boundary's
    linear estimate, then step up (or down) one replica at a time with a simulation each."""
    if boundary_multiple > 0:
        guess = math.ceil(dep.replicas * factor / boundary_multiple)
    else:
        guess = dep.replicas * math.ceil(factor)
    r = min(max(guess, 1), MAX_REPLICAS)
    if holds_at(setting, dep, replicas=r, multiple=factor).holds:
        while r > 1 and holds_at(setting, dep, replicas=r - 1, multiple=factor).holds:
            r -= 1
        return r
    for _ in range(REPLICA_TRIES):
        r = min(r + max(1, r // 4), MAX_REPLICAS)
        if holds_at(setting, dep, replicas=r, multiple=factor).holds:
            return r
        if r == MAX_REPLICAS:
            break
    return None


def plan_capacity(setting: Setting, pick: SizedDeployment, alternatives: Sequence[SizedDeployment],
                  rates: TraceRates, searched: Mapping[str, BoundarySearch] | None = None
                  ) -> Capacity:
    """The pick's boundary, each alternative's, the growth table and the pick's load curve;
    `searched` holds boundary searches already run, by deployment label (the decision's).

    Raises:
        UsageError: the simulator refuses a config (never one the search ranked).
    """
    searched = searched or {}

    def found_for(dep: SizedDeployment) -> BoundarySearch:
        return searched.get(dep.label) or search_boundary(setting, dep)

    found = found_for(pick)
    pick_boundary = boundary_of(found, pick, rates)
    alt_found = [(alt, found_for(alt)) for alt in alternatives]
    others = [(alt, boundary_of(f, alt, rates)) for alt, f in alt_found]
    opts = setting.goals.sim_options()
    limits = (opts.slo_ttft_s, opts.slo_tpot_s)
    return Capacity(
        today_rps=rates.today_rps, mean_rps=rates.mean_rps, peak_rps=rates.peak_rps,
        peak_window_s=rates.peak_window_s, slo_ttft_s=opts.slo_ttft_s,
        slo_tpot_s=opts.slo_tpot_s, pick=pick_boundary, alternatives=[b for _, b in others],
        growth=[_growth_row(setting, f, (pick, pick_boundary), others, found=found,
                            rates=rates) for f in GROWTH_FACTORS],
        curve=_curve(found, pick_boundary, rates, limits),
        alternative_curves=[_curve(f, b, rates, limits)
                            for (_, f), (_, b) in zip(alt_found, others, strict=True)],
        method=(f"the trace's own arrivals compressed (shape kept), {pick_boundary.simulations} "
                f"simulations for the pick: loads doubled from today's until the p95 SLOs "
                f"break or the load is not kept up with, then bisected to {RESOLUTION:.0%}"),
    )


def _growth_row(setting: Setting, factor: float, pick: tuple[SizedDeployment, Boundary],
                others: list[tuple[SizedDeployment, Boundary]], *, found: BoundarySearch,
                rates: TraceRates) -> GrowthRow:
    dep, bound = pick
    multiple = bound.rate_rps / rates.today_rps if rates.today_rps else 0.0
    replicas = replicas_needed(setting, dep, factor, boundary_multiple=multiple)
    today = next((t for t in found.trials if t.multiple == factor), None)
    if today is None:
        today = holds_at(setting, dep, replicas=dep.replicas, multiple=factor)
    best: tuple[int, str] | None = None
    for alt, alt_bound in others:
        alt_multiple = alt_bound.rate_rps / rates.today_rps if rates.today_rps else 0.0
        r = replicas_needed(setting, alt, factor, boundary_multiple=alt_multiple)
        if r is not None and (best is None or r * alt.gpus_per_replica < best[0]):
            best = (r * alt.gpus_per_replica, alt.label)
    return GrowthRow(
        factor=factor, rate_rps=factor * rates.today_rps, pick_replicas=replicas,
        pick_gpus=None if replicas is None else replicas * dep.gpus_per_replica,
        binding=today.binding, alternative=best[1] if best else None,
        alternative_gpus=best[0] if best else None)


def _curve(found: BoundarySearch, boundary: Boundary, rates: TraceRates,
           limits: tuple[float | None, float | None]) -> LoadCurve:
    points = [LoadPoint(multiple=t.multiple, rate_rps=t.multiple * rates.today_rps,
                        ttft_p95_s=t.ttft_p95_s, tpot_p95_s=t.tpot_p95_s, holds=t.holds)
              for t in sorted(found.trials, key=lambda t: t.multiple)]
    return LoadCurve(label=boundary.label, points=points, slo_ttft_s=limits[0],
                     slo_tpot_s=limits[1],
                     mean_rps=rates.mean_rps, peak_rps=rates.peak_rps,
                     boundary_rps=boundary.rate_rps)
