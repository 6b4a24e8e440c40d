"""The fleet over the day: how many replicas of the pick each window of the user's own
arrivals needs, at the pick's SLO boundary.

Owns the plan windows (hours when the trace spans at least MIN_HOURLY_SPAN_S, at most
MAX_WINDOWS of them, else its span cut into FEW_WINDOWS), the replicas per window (the
window's mean rate over one replica's share of the boundary, rounded up, at least one:
arrivals are dealt round-robin, so r replicas hold r times one replica's boundary; the
growth table's simulated counts check that estimate at 2x, 5x and 10x), the GPU-hours
against a fleet sized for the busiest window kept all day, and each window's headroom.
Arithmetic on the boundary and the profile's rate series; no simulation, no I/O.
"""

from __future__ import annotations

import math

import numpy as np

from core.capacity import Boundary, DayPlan, DayWindow
from profiler.schema import RateSeries

MIN_HOURLY_SPAN_S = 2 * 3600.0  # hourly windows from two hours of trace on
FEW_WINDOWS = 12  # a shorter trace is cut into this many windows
# A month of hours: past it windows widen by whole hours. Two requests 30 years apart made
# 262,945 hourly windows and a 48 MB recommendation.
MAX_WINDOWS = 31 * 24


def plan_window_s(series: RateSeries, span_s: float) -> float:
    """Hours for a trace of MIN_HOURLY_SPAN_S or more (whole hours, enough that there are at
    most MAX_WINDOWS); else its span over FEW_WINDOWS; rounded up to whole windows of the
    rate series."""
    if span_s >= MIN_HOURLY_SPAN_S:
        width = 3600.0 * max(1, math.ceil(span_s / 3600.0 / MAX_WINDOWS))
    else:
        width = span_s / FEW_WINDOWS
    return max(series.window_s, math.ceil(width / series.window_s) * series.window_s)


def plan_day(series: RateSeries | None, span_s: float | None, pick: Boundary
             ) -> DayPlan | None:
    """The day plan of the pick (module docstring); None without a rate series, a span, or
    a boundary that holds any load."""
    if series is None or not span_s or not series.t_s or pick.rate_rps <= 0:
        return None
    per_replica = pick.rate_rps / pick.replicas
    gpus_per_replica = pick.gpus // pick.replicas
    width = plan_window_s(series, span_s)
    which = np.floor(np.asarray(series.t_s) / width).astype(np.int64)
    counts = np.bincount(which, weights=np.asarray(series.requests, dtype=np.float64))
    windows = []
    for k, requests in enumerate(counts):
        start = k * width
        duration = min(width, max(span_s - start, series.window_s))  # the last one is cut
        rate = float(requests) / duration
        replicas = max(1, math.ceil(rate / per_replica))
        windows.append(DayWindow(
            t_s=start, duration_s=duration, rate_rps=rate, replicas=replicas,
            gpus=replicas * gpus_per_replica,
            headroom=replicas * per_replica / rate if rate > 0 else None))
    hours = sum(w.duration_s for w in windows) / 3600.0
    peak = max(w.gpus for w in windows)
    headrooms = [w.headroom for w in windows if w.headroom is not None]
    return DayPlan(
        window_s=width, per_replica_rps=per_replica, windows=windows,
        gpu_hours=sum(w.gpus * w.duration_s for w in windows) / 3600.0,
        peak_fleet_gpus=peak, peak_fleet_gpu_hours=peak * hours,
        min_headroom=min(headrooms) if headrooms else None,
        method=(f"each window's mean arrival rate over one replica's share of the pick's SLO "
                f"boundary ({per_replica:,.3g} req/s), rounded up, at least one replica: "
                "arrivals dealt round-robin, r replicas hold r times one replica's boundary "
                "(the growth table's simulated counts check it); bursts inside a window are "
                "in the boundary, found on the trace's own arrivals"))
