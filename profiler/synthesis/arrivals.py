"""Arrival times for `profiler.synthesis.synth`: the profile's rate envelope, looped, with
Gamma renewal gaps calibrated to its inter-arrival CV (or a Poisson process), and helpers on
array streams.

The plain Poisson process is `core.arrivals`'; the envelope placement (a fixed count per
window, split by Gamma gaps) is this module's own algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.arrivals import renewal_times
from core.errors import UsageError
from profiler.schema import Profile

# Arrival times per streamed array; `profiler.synthesis.synth` writes chunks this big.
CHUNK_ROWS = 1_000_000
ENVELOPE_WINDOW_S = 60.0
CALIBRATION_ROWS = 100_000
_SHAPE_BOUNDS = (1e-2, 1e4)  # Gamma shape = 1/CV² stays within CV 0.01 .. 10
# Width of log(shape) where the search stops: a CV within ~0.1 % of the target (CV ~ shape^-½
# for Gamma gaps), finer than the ~0.4 % a CV measured on CALIBRATION_ROWS gaps can tell apart
# (24 halvings of the whole range, as before, cost 0.6 s of a 1.1 s synthesis of 50,000
# requests from BurstGPT's first 400, whose CV lies past the lower bound).
_SHAPE_LOG_TOL = 2e-3


@dataclass(slots=True)
class _Envelope:
    """Piecewise-constant rate over one period of the source (window starts, widths, counts)."""

    starts: Any
    widths: Any
    counts: Any
    period_s: float
    scale: float = 1.0  # synthetic requests per source request (sets the mean rate)
    shape: float = 1.0  # Gamma shape of the gaps inside a window


def arrival_stream(
    profile: Profile, n: int, rng: Any, *, rate_scale: float, rate_rps: float | None,
    notes: list[str],
) -> Iterator[Any]:
    """An endless stream of arrival-time arrays (seconds, increasing, first arrival 0)."""
    series = profile.rate_series
    if not profile.duration_s or not profile.mean_qps or series is None:
        if rate_rps is None:
            raise UsageError("the profile has no arrival times: a rate must be given "
                             "(--rate REQ_PER_S)")
        rate = rate_rps * rate_scale
        notes.append(f"arrivals: Poisson at {rate:g} req/s (the profile has no arrival times)")
        return _poisson_stream(rng, rate)
    rate = (rate_rps or profile.mean_qps) * rate_scale
    env = _envelope(series.window_s, series.requests, profile.duration_s)
    env.scale = _rate_scale_factor(env, n, rate)
    target_cv = 1.0 if profile.interarrival_cv is None else profile.interarrival_cv
    env.shape, cv = _calibrate_shape(env, CALIBRATION_ROWS, target_cv, rng.spawn(1)[0])
    notes.append(
        f"arrivals: mean {rate:g} req/s ({'given rate' if rate_rps else 'profile mean_qps'} "
        f"x rate_scale {rate_scale:g}); rate envelope = the profile's request counts per "
        f"{env.widths[0]:g} s window, looped every {env.period_s:g} s, each window's count "
        f"fixed; inside a window a Gamma renewal process with shape {env.shape:.4g} "
        f"(calibrated: inter-arrival CV {cv:.3f}, profile {target_cv:.3f})"
    )
    return _shift_to_zero(_envelope_stream(env, rng))


def _envelope(window_s: float, requests: list[int], duration_s: float) -> _Envelope:
    """Source counts regrouped into windows of about `ENVELOPE_WINDOW_S` over one period.

    The period is a whole number of windows, so looped windows stay on the 60 s grid the
    profile counts peaks on; a partial last window keeps its rate, a short one is merged.
    """
    import numpy as np

    group = max(1, round(ENVELOPE_WINDOW_S / window_s)) if window_s < ENVELOPE_WINDOW_S else 1
    counts = np.asarray(requests, dtype=np.float64)
    counts = np.pad(counts, (0, -len(counts) % group)).reshape(-1, group).sum(axis=1)
    width = window_s * group
    exposure = duration_s - (len(counts) - 1) * width
    if len(counts) > 1 and exposure < width / 2:  # too short to estimate a rate
        counts = np.concatenate([counts[:-2], [counts[-2] + counts[-1]]])
    elif 0 < exposure < width:
        counts[-1] *= width / exposure
    starts = np.arange(len(counts)) * width
    return _Envelope(starts=starts, widths=np.full(len(counts), width), counts=counts,
                     period_s=float(len(counts) * width))


def _rate_scale_factor(env: _Envelope, n: int, rate: float) -> float:
    """Synthetic requests per source request so that n requests span n / rate seconds."""
    import numpy as np

    horizon = n / rate
    cycles, rem = divmod(horizon, env.period_s)
    i = max(0, int(np.searchsorted(env.starts, rem, side="right")) - 1)
    partial = env.counts[:i].sum() + env.counts[i] * min(1.0, (rem - env.starts[i]) /
                                                         env.widths[i])
    expected = cycles * env.counts.sum() + partial
    if expected <= 0:
        return rate * env.period_s / env.counts.sum()
    return float(n / expected)


def _window_counts(env: _Envelope, first: int, count: int) -> tuple[Any, Any, Any]:
    """Integer arrivals, start and width of global windows first .. first + count - 1.

    Counts round the cumulative expected count, so they never drift from the envelope.
    """
    import numpy as np

    g = np.arange(first, first + count, dtype=np.int64)
    cycle, src = np.divmod(g, len(env.counts))
    cum = np.concatenate([[0.0], np.cumsum(env.counts)])
    lo = env.scale * (cycle * cum[-1] + cum[src])
    hi = lo + env.scale * env.counts[src]
    counts = (np.floor(hi + 0.5) - np.floor(lo + 0.5)).astype(np.int64)
    return counts, cycle * env.period_s + env.starts[src], env.widths[src]


def _place(
    rng: Any, counts: Any, starts: Any, widths: Any, shape: float, *, pin: bool = False
) -> Any:
    """Arrival times: per window, `count` points split by count + 1 Gamma(shape) gaps.

    `pin` puts the first point of the first window at its start (the trace's t = 0).
    """
    import numpy as np

    keep = counts > 0
    counts, starts, widths = counts[keep], starts[keep], widths[keep]
    gaps = rng.gamma(shape, size=int(counts.sum() + len(counts)))
    if pin and len(gaps):
        gaps[0] = 0.0
    cs = np.cumsum(gaps)
    ends = np.cumsum(counts + 1) - 1
    base = np.concatenate([[0.0], cs[ends[:-1]]])
    total = cs[ends] - base
    owner = np.repeat(np.arange(len(counts)), counts)
    inner = np.ones(len(gaps), dtype=bool)
    inner[ends] = False
    frac = np.divide(cs[inner] - base[owner], total[owner],
                     out=np.zeros(len(owner)), where=total[owner] > 0)
    ends_s = starts + widths
    last = ends_s - 4 * np.spacing(ends_s)  # a point never rounds into the next window
    return np.minimum(starts[owner] + frac * widths[owner], last[owner])


def _envelope_stream(env: _Envelope, rng: Any, rows: int = CHUNK_ROWS) -> Iterator[Any]:
    per_window = env.scale * env.counts.sum() / len(env.counts)
    step = int(max(1, min(1 << 20, rows / max(per_window, 1e-9))))
    first = 0
    while True:
        counts, starts, widths = _window_counts(env, first, step)
        yield _place(rng, counts, starts, widths, env.shape, pin=first == 0)
        first += step


def _calibrate_shape(env: _Envelope, n: int, target_cv: float, rng: Any) -> tuple[float, float]:
    """The Gamma shape whose synthetic inter-arrival CV (over n requests) is nearest target:
    a bound when the target lies past what that bound gives, else bisection in log(shape)
    down to _SHAPE_LOG_TOL."""
    import numpy as np

    state = rng.bit_generator.state

    def cv_at(shape: float) -> float:
        rng.bit_generator.state = state  # common random numbers: a smooth, monotone search
        env.shape = shape
        t = _take(_envelope_stream(env, rng, n), max(n, 2))
        gaps = np.diff(t)
        return float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 0.0

    lo, hi = (math.log(b) for b in _SHAPE_BOUNDS)  # CV falls as the shape grows
    if (cv := cv_at(math.exp(lo))) <= target_cv:  # burstier than the lowest shape reaches
        return math.exp(lo), cv
    if (cv := cv_at(math.exp(hi))) >= target_cv:  # smoother than the highest shape reaches
        return math.exp(hi), cv
    while hi - lo > _SHAPE_LOG_TOL:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cv_at(math.exp(mid)) > target_cv else (lo, mid)
    shape = math.exp((lo + hi) / 2)
    return shape, cv_at(shape)


def _poisson_stream(rng: Any, rate: float) -> Iterator[Any]:
    """Poisson arrivals (`core.arrivals`, the one implementation), first at 0, in arrays of
    CHUNK_ROWS that continue one another."""
    at = renewal_times(rng, rate, count=CHUNK_ROWS, first_at_start=True)
    while True:
        yield at
        at = renewal_times(rng, rate, count=CHUNK_ROWS, start_s=float(at[-1]))


def _shift_to_zero(stream: Iterator[Any]) -> Iterator[Any]:
    origin = None
    for t in stream:
        if len(t) == 0:
            continue
        origin = t[0] if origin is None else origin
        yield t - origin


def _take(stream: Iterator[Any], n: int) -> Any:
    import numpy as np

    parts, have = [], 0
    while have < n:
        parts.append(next(stream))
        have += len(parts[-1])
    return np.concatenate(parts)[:n]


def rechunk(stream: Iterator[Any], n: int, size: int) -> Iterator[Any]:
    """Arrays of exactly `size` items (the last one shorter) from `stream`, n items in all."""
    import numpy as np

    buffer, have, done = [], 0, 0
    while done < n:
        want = min(size, n - done)
        while have < want:
            buffer.append(next(stream))
            have += len(buffer[-1])
        joined = np.concatenate(buffer)
        buffer, have = [joined[want:]], have - want
        done += want
        yield joined[:want]
