"""The SLO boundary on the user's own trace: the highest load a deployment holds.

Owns the boundary search (the trace's arrivals compressed by `SimOptions.time_scale`, its
lengths, bursts and prefix reuse kept; an exponential bracket from today's load, then
bisection: a handful of simulations, not a grid), the trace's rates it is stated against,
and the `core.capacity.Boundary` record with its range from the prediction's error. Each
trial is `trial`'s. No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.capacity import Boundary
from recommender.decision.capacity.trial import Setting, SizedDeployment, Trial, holds_at

BRACKET_STEP = 2.0  # the bracket doubles (or halves) the load from today's
MAX_MULTIPLE = 1024.0  # the search stops there (the boundary is then "at least")
MIN_MULTIPLE = 1.0 / 1024
RESOLUTION = 0.02  # bisection stops when the failing load is within 2 % of the holding one


@dataclass(frozen=True, slots=True)
class TraceRates:
    """The trace's rates the boundary is stated against."""

    today_rps: float  # the simulated window's own rate: load multiple 1
    mean_rps: float
    peak_rps: float | None
    peak_window_s: float | None


@dataclass(slots=True)
class BoundarySearch:
    """What the boundary search of one deployment found."""

    trials: list[Trial]
    holding: Trial | None
    failing: Trial | None


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
