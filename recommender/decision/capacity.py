"""How far a deployment holds: the SLO boundary on the user's own trace, and growth.

Owns the boundary search (the trace's arrivals compressed by `SimOptions.time_scale`, its
lengths, bursts and prefix reuse kept; an exponential bracket from today's load, then
bisection: a handful of simulations, not a grid), the limit that binds first (read from the
simulator's own state at the first load that fails), the growth table (replicas of the pick
for 2×/5×/10× today's traffic, the cheapest other engine that holds it) and the load curve
the front ends chart. The records are `core.capacity`'s. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core.capacity import Boundary, Capacity, GrowthRow, Limit, LoadCurve, LoadPoint
from core.figures import Band, Interval
from engines.config import EngineConfig
from recommender.decision.scoring import (
    KEEP_UP_SHARE,
    MAX_REJECTED_SHARE,
    Goals,
    Target,
    served_rps,
)
from recommender.model.defaults import scheduler_caps
from recommender.sim.result import SimResult
from recommender.sim.simulator import SimRequests, simulate
from recommender.sim.trace_window import replica_share

GROWTH_FACTORS = (2.0, 5.0, 10.0)
BRACKET_STEP = 2.0  # the bracket doubles (or halves) the load from today's
MAX_MULTIPLE = 1024.0  # the search stops there (the boundary is then "at least")
MIN_MULTIPLE = 1.0 / 1024
RESOLUTION = 0.02  # bisection stops when the failing load is within 2 % of the holding one
KV_FULL = 0.95  # a pool this full at the failing load counts as the KV limit binding
INTERFERENCE_ITL_RATIO = 2.0  # p99 emission gap over p50: steps stretched by prefills
MAX_REPLICAS = 4096
REPLICA_TRIES = 8


@dataclass(frozen=True, slots=True)
class SizedDeployment:
    """One candidate to size: its config, replicas, label, the prediction's band and its
    throughput interval (what the boundary's range is stated from when present)."""

    config: EngineConfig
    replicas: int
    label: str
    band: Band | None
    interval: Interval | None = None

    @property
    def gpus_per_replica(self) -> int:
        return self.config.gpus_per_instance


@dataclass(frozen=True, slots=True)
class Setting:
    """What every trial simulates on: the window's requests, the hardware and the limits."""

    requests: SimRequests
    target: Target
    goals: Goals


@dataclass(frozen=True, slots=True)
class TraceRates:
    """The trace's rates the boundary is stated against."""

    today_rps: float  # the simulated window's own rate: load multiple 1
    mean_rps: float
    peak_rps: float | None
    peak_window_s: float | None


@dataclass(slots=True)
class Trial:
    """One simulated load on one deployment and its verdict."""

    multiple: float
    holds: bool
    binding: Limit
    ttft_p95_s: float | None
    tpot_p95_s: float | None


@dataclass(slots=True)
class BoundarySearch:
    """What the boundary search of one deployment found."""

    trials: list[Trial]
    holding: Trial | None
    failing: Trial | None


def holds_at(setting: Setting, dep: SizedDeployment, *, replicas: int, multiple: float) -> Trial:
    """Simulate `replicas` copies of `dep` on the trace compressed `multiple` times (replica
    0's round-robin share) and judge it: p95 TTFT and TPOT within the limits, the load kept
    up with (KEEP_UP_SHARE of the offered rate) and no more refusals than scoring allows."""
    target = setting.target
    share = replica_share(setting.requests, replicas * dep.config.dp)  # a DP rank's share
    options = setting.goals.sim_options().model_copy(update={"time_scale": 1.0 / multiple})
    result = simulate(share, dep.config, target.gpu, target.model, params=target.params,
                      options=options)
    s = result.summary
    span = float(share.arrival_s[-1] - share.arrival_s[0]) / multiple
    n = len(share.arrival_s)
    # All sent at once (or one request): no rate to keep up with; the SLOs alone judge.
    kept_up = span <= 0 or served_rps(s, span) >= KEEP_UP_SHARE * n / span
    ttft_ok = _within(s.ttft_s.p95, options.slo_ttft_s)
    tpot_ok = _within(s.tpot_s.p95, options.slo_tpot_s)
    served = s.rejected <= MAX_REJECTED_SHARE * n
    ok = kept_up and ttft_ok and tpot_ok and served
    binding: Limit = "none" if ok else _binding(result, dep.config, target,
                                                queue_grew=not (kept_up and ttft_ok))
    return Trial(multiple, ok, binding, s.ttft_s.p95, s.tpot_s.p95)


def _within(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)


def _binding(result: SimResult, config: EngineConfig, target: Target, *,
             queue_grew: bool) -> Limit:
    """The limit the simulator's state shows binding at a load that fails."""
    s = result.summary
    if not queue_grew:  # only TPOT broke: decode steps are too slow
        itl = s.itl_s
        if itl.p50 and itl.p99 and itl.p99 > INTERFERENCE_ITL_RATIO * itl.p50:
            return "prefill_interference"  # some steps are much longer: they carry prefills
        return "compute"
    kv_peak = float(np.max(result.kv_usage)) if result.kv_usage.size else 0.0
    if s.preemptions > 0 or kv_peak >= KV_FULL or s.rejected > 0:
        return "kv_capacity"
    seqs = scheduler_caps(config, target.gpu).max_running
    queued = result.queue_len > 0
    if np.any(result.running_seqs[queued] >= seqs):
        return "max_num_seqs"
    return "compute"


def search_boundary(setting: Setting, dep: SizedDeployment) -> BoundarySearch:
    """Bracket the boundary by doubling (or halving) the load from today's, then bisect in
    log space until the failing load is within RESOLUTION of the holding one."""
    trials: list[Trial] = []

    def trial(m: float) -> Trial:
        t = holds_at(setting, dep, replicas=dep.replicas, multiple=m)
        trials.append(t)
        return t

    first = trial(1.0)
    holding, failing = (first, None) if first.holds else (None, first)
    m = 1.0
    while holding is None and m / BRACKET_STEP >= MIN_MULTIPLE:
        m /= BRACKET_STEP
        t = trial(m)
        holding, failing = (t, failing) if t.holds else (None, t)
    while failing is None and m * BRACKET_STEP <= MAX_MULTIPLE:
        m *= BRACKET_STEP
        t = trial(m)
        holding, failing = (t, None) if t.holds else (holding, t)
    while holding is not None and failing is not None and \
            failing.multiple / holding.multiple > 1.0 + RESOLUTION:
        t = trial(math.sqrt(holding.multiple * failing.multiple))
        holding, failing = (t, failing) if t.holds else (holding, t)
    return BoundarySearch(trials, holding, failing)


def boundary_of(search: BoundarySearch, dep: SizedDeployment, rates: TraceRates) -> Boundary:
    """The search's result as a Boundary record, its range from the prediction's error: the
    throughput interval's p10-p90 factors where the deployment has one (the boundary is a
    load, off by as much as the throughput it rests on), else ± the cell's median error."""
    multiple = search.holding.multiple if search.holding is not None else 0.0
    rate = multiple * rates.today_rps
    low = high = None
    if dep.interval is not None:
        low, high = rate * dep.interval.low, rate * dep.interval.high
    elif dep.band is not None:
        low, high = rate * max(0.0, 1.0 - dep.band.median_ape), rate * (1.0 + dep.band.median_ape)
    return Boundary(
        label=dep.label, engine=dep.config.engine, replicas=dep.replicas,
        gpus=dep.replicas * dep.gpus_per_replica, rate_rps=rate, rate_low_rps=low,
        rate_high_rps=high, multiple_of_mean=rate / rates.mean_rps if rates.mean_rps else 0.0,
        multiple_of_peak=rate / rates.peak_rps if rates.peak_rps else None,
        binding=search.failing.binding if search.failing is not None else "none",
        capped=search.failing is None, simulations=len(search.trials))


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
