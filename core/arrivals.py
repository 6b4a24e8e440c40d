"""Arrival times of open-loop processes, one implementation for every stage (workload
synthesis, benchmark schedules, simulated predictions).

All draws come from the `numpy.random.Generator` the caller seeds. Times are seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

Process = Literal["poisson", "gamma"]


def gaps(rng: np.random.Generator, n: int, rate_rps: float, process: Process = "poisson",
         cv: float = 1.0) -> np.ndarray:
    """`n` inter-arrival gaps with mean 1/rate: exponential (Poisson), or Gamma with
    coefficient of variation `cv` (shape 1/cv², so cv = 1 is Poisson in distribution)."""
    if process == "poisson":
        return rng.exponential(1.0 / rate_rps, n)
    shape = 1.0 / cv**2
    return rng.gamma(shape, 1.0 / (rate_rps * shape), n)


def renewal_times(rng: np.random.Generator, rate_rps: float, *, count: int | None = None,
                  start_s: float = 0.0, end_s: float | None = None,
                  process: Process = "poisson", cv: float = 1.0,
                  first_at_start: bool = False) -> np.ndarray:
    """Arrivals `start + cumsum(gaps)`, cut at `end_s` (exclusive) and/or at `count` arrivals
    (at least one of the two). `first_at_start` puts the first arrival at `start_s` (a trace
    that begins with a request) instead of one gap after it."""
    import numpy as np

    if count is None and end_s is None:
        raise ValueError("renewal_times needs count or end_s")
    shift = 1 if first_at_start else 0
    if end_s is None:
        assert count is not None
        g = gaps(rng, count, rate_rps, process, cv)
        return start_s + np.cumsum(g) - (g[0] if shift and count else 0.0)
    n = int((end_s - start_s) * rate_rps * 1.2) + 16
    at = start_s + np.cumsum(gaps(rng, n, rate_rps, process, cv))
    while at[-1] < end_s:  # rare: draw more, continuing the same stream
        at = np.concatenate([at, at[-1] + np.cumsum(gaps(rng, n, rate_rps, process, cv))])
    if shift:
        at = at - (at[0] - start_s)
    at = at[at < end_s]
    return at[:count] if count is not None else at


def exact_count_poisson(rng: np.random.Generator, rate_rps: float, start_s: float,
                        end_s: float) -> np.ndarray:
    """Poisson arrivals in [start_s, end_s) conditioned on their count being rate × span.

    Why: an unconditioned 10 s run at 1,000 req/s offers 1,000 ± 10 req/s (± 1 sd) by chance
    alone; given its count, a Poisson process's arrival times are independent uniforms over
    the window (order statistics), so sorting `round(rate × span)` uniform draws keeps the
    exponential gaps and offers exactly the rate asked for.
    """
    import numpy as np

    n = round(rate_rps * (end_s - start_s))
    at = np.sort(rng.uniform(start_s, end_s, n))
    return at[at < end_s]  # uniform() can return its upper bound through rounding


def piecewise_poisson(rng: np.random.Generator,
                      pieces: Sequence[tuple[float, float, float]]) -> list[np.ndarray]:
    """Each (start_s, end_s, rate_rps) piece's Poisson arrivals in turn, drawn from one
    stream: `exact_count_poisson` per piece, so each offers exactly its rate (a burst's
    steady, burst and recovery phases; a soak's windows). `bench` sends them and `predict`
    simulates them."""
    return [exact_count_poisson(rng, rate, start, end) for start, end, rate in pieces]
