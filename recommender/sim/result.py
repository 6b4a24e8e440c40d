"""What a simulation returns: per-request latency distributions, summary, time series.

Owns the result records (`SimSummary`, `SimResult`) and the statistics over the kernel's raw
output (`histogram_stats` / `histogram_max` for the log-binned ITL histogram, `series` for the
time series). Latencies are `core.figures.Latency` (None where no request has a value);
`recommender.sim.simulator` fills the records and re-exports them.
"""

from __future__ import annotations

import numpy as np
from pydantic import ConfigDict, Field

from core.figures import EMPTY, Latency, ServingFigures
from core.records import Record


class SimSummary(ServingFigures):
    """Summary figures of one simulated run on one replica (the serving figures, plus the
    run's counts). `itl_s` pools the gaps between a request's consecutive token emissions
    over all requests (a speculative step's tokens arrive together: one gap); max in
    `itl_max_s`."""

    completed: int = Field(ge=0, description="Requests served to the end.")
    rejected: int = Field(ge=0, description="Requests that can never fit (KV pool or budget).")
    makespan_s: float = Field(ge=0, description="First arrival (t = 0) to last finish.")
    itl_max_s: float | None = Field(default=None, description="Largest gap of any request.")
    steps: int = Field(ge=0, description="Engine iterations simulated.")
    preemptions: int = Field(ge=0, description="Recompute preemptions.")
    kv_capacity_blocks: int = Field(ge=0, description="KV pool in simulation blocks.")


class SimResult(Record):
    """Per-request arrays (input order; NaN for rejected), summary, and time series."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    ttft_s: np.ndarray = Field(description="Per request: arrival to first token, s.")
    tpot_s: np.ndarray = Field(description="Per request: (e2e − ttft)/(out − 1); NaN if out = 1.")
    e2e_s: np.ndarray = Field(description="Per request: arrival to last token, s.")
    preemptions: np.ndarray = Field(description="Per request: times preempted.")
    max_itl_s: np.ndarray | None = Field(
        default=None, description="Per request: largest gap between two emissions, s."
    )
    itl_histogram: np.ndarray | None = Field(
        default=None,
        description="Pooled emission gaps: the kernel's log-binned counts, then (sum, count, "
        "max); `histogram_stats` reads it (runs combine by adding histograms).",
    )
    series_t_s: np.ndarray = Field(description="Time of each series sample, s.")
    queue_len: np.ndarray = Field(description="Waiting requests (arrived, not running).")
    running_seqs: np.ndarray = Field(description="Running sequences.")
    kv_usage: np.ndarray = Field(description="Share of KV blocks held by running requests.")
    summary: SimSummary = Field(description="Summary figures.")


def series(raw: np.ndarray, interval: float | None) -> tuple[np.ndarray, ...]:
    if interval is None or raw.shape[0] == 0:
        return tuple(np.ascontiguousarray(raw[:, c]) for c in range(4))
    bins = np.floor(raw[:, 0] / interval).astype(np.int64)
    uniq, inv = np.unique(bins, return_inverse=True)
    counts = np.bincount(inv)
    cols = [np.bincount(inv, weights=raw[:, c]) / counts for c in (1, 2, 3)]
    return ((uniq + 1) * interval, *cols)


def histogram_stats(itl: np.ndarray) -> Latency:
    """The `Latency` of the kernel's log-binned gap histogram, its count the gaps pooled
    (percentiles at the geometric centre of their bin, capped at the largest gap: within
    0.3 % of the exact value)."""
    from recommender.sim.kernel.record import ITL_BINS, ITL_BINS_PER_DECADE, ITL_LO_S

    nb = ITL_BINS
    counts, (total, n, biggest) = itl[:nb], itl[nb:nb + 3]
    if n == 0:
        return EMPTY
    cdf = np.cumsum(counts)
    edges = ITL_LO_S * 10.0 ** ((np.arange(nb) + 0.5) / ITL_BINS_PER_DECADE)
    q = [min(float(edges[np.searchsorted(cdf, f * n)]), biggest) for f in (0.5, 0.9, 0.95, 0.99)]
    return Latency(count=int(n), mean=float(total / n), p50=q[0], p90=q[1], p95=q[2], p99=q[3])


def histogram_max(itl: np.ndarray) -> float | None:
    """The largest gap the kernel's histogram recorded (None without any gap)."""
    from recommender.sim.kernel.record import ITL_BINS

    nb = ITL_BINS
    return float(itl[nb + 2]) if itl[nb + 1] > 0 else None
