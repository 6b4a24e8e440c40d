"""What a simulation returns: per-request latency distributions, summary, time series.

Owns the result records (`LatencyStats`, `SimSummary`, `SimResult`) and the statistics over
the kernel's raw output (`latency_stats`, `histogram_stats` for the log-binned ITL histogram,
`series` for the time series). `recommender.simulator` fills them and re-exports them.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class LatencyStats(BaseModel):
    """Distribution of one per-request latency, seconds (NaN entries ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p50: float = Field(description="Median, seconds.")
    p90: float = Field(description="90th percentile, seconds.")
    p95: float = Field(description="95th percentile, seconds.")
    p99: float = Field(description="99th percentile, seconds.")
    mean: float = Field(description="Mean, seconds.")


class SimSummary(BaseModel):
    """Summary figures of one simulated run on one replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    completed: int = Field(ge=0, description="Requests served to the end.")
    rejected: int = Field(ge=0, description="Requests that can never fit (KV pool or budget).")
    makespan_s: float = Field(ge=0, description="First arrival (t = 0) to last finish.")
    ttft_s: LatencyStats = Field(description="Time to first token.")
    tpot_s: LatencyStats = Field(description="Time per output token after the first.")
    e2e_s: LatencyStats = Field(description="Arrival to last token.")
    itl_s: LatencyStats | None = Field(
        default=None,
        description="Gaps between a request's consecutive token emissions, pooled over all "
        "requests (a speculative step's tokens arrive together: one gap); max in `itl_max_s`.",
    )
    itl_max_s: float | None = Field(default=None, description="Largest gap of any request.")
    request_throughput_rps: float = Field(ge=0, description="Completed requests per second.")
    output_throughput_tok_s: float = Field(ge=0, description="Output tokens per second.")
    total_throughput_tok_s: float = Field(ge=0, description="Input + output tokens/s.")
    goodput_rps: float | None = Field(description="Requests/s meeting every SLO (None: no SLO).")
    steps: int = Field(ge=0, description="Engine iterations simulated.")
    preemptions: int = Field(ge=0, description="Recompute preemptions.")
    kv_capacity_blocks: int = Field(ge=0, description="KV pool in simulation blocks.")


class SimResult(BaseModel):
    """Per-request arrays (input order; NaN for rejected), summary, and time series."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    ttft_s: np.ndarray = Field(description="Per request: arrival to first token, s.")
    tpot_s: np.ndarray = Field(description="Per request: (e2e − ttft)/(out − 1); NaN if out = 1.")
    e2e_s: np.ndarray = Field(description="Per request: arrival to last token, s.")
    preemptions: np.ndarray = Field(description="Per request: times preempted.")
    max_itl_s: np.ndarray | None = Field(
        default=None, description="Per request: largest gap between two emissions, s."
    )
    itl_histogram: np.ndarray | None = Field(
        default=None,
        description="Pooled emission gaps: sim_kernel's log-binned counts, then (sum, count, "
        "max); `histogram_stats` reads it (runs combine by adding histograms).",
    )
    series_t_s: np.ndarray = Field(description="Time of each series sample, s.")
    queue_len: np.ndarray = Field(description="Waiting requests (arrived, not running).")
    running_seqs: np.ndarray = Field(description="Running sequences.")
    kv_usage: np.ndarray = Field(description="Share of KV blocks held by running requests.")
    summary: SimSummary = Field(description="Summary figures.")


def latency_stats(x: np.ndarray) -> LatencyStats:
    """mean/p50/p90/p95/p99 of the finite entries of `x` (NaN when there are none)."""
    x = x[np.isfinite(x)]
    if x.size == 0:
        return LatencyStats(p50=math.nan, p90=math.nan, p95=math.nan, p99=math.nan, mean=math.nan)
    q = np.percentile(x, [50, 90, 95, 99])
    return LatencyStats(p50=q[0], p90=q[1], p95=q[2], p99=q[3], mean=float(x.mean()))


def series(raw: np.ndarray, interval: float | None) -> tuple[np.ndarray, ...]:
    if interval is None or raw.shape[0] == 0:
        return tuple(np.ascontiguousarray(raw[:, c]) for c in range(4))
    bins = np.floor(raw[:, 0] / interval).astype(np.int64)
    uniq, inv = np.unique(bins, return_inverse=True)
    counts = np.bincount(inv)
    cols = [np.bincount(inv, weights=raw[:, c]) / counts for c in (1, 2, 3)]
    return ((uniq + 1) * interval, *cols)


def histogram_stats(itl: np.ndarray) -> tuple[LatencyStats, float]:
    """LatencyStats and max of the kernel's log-binned gap histogram (percentiles at the
    geometric centre of their bin: within 0.3 % of the exact value)."""
    from recommender import sim_kernel

    nb = sim_kernel.ITL_BINS
    counts, (total, n, biggest) = itl[:nb], itl[nb:nb + 3]
    if n == 0:
        return latency_stats(np.zeros(0)), math.nan
    cdf = np.cumsum(counts)
    edges = sim_kernel.ITL_LO_S * 10.0 ** ((np.arange(nb) + 0.5) / sim_kernel.ITL_BINS_PER_DECADE)
    q = [min(float(edges[np.searchsorted(cdf, f * n)]), biggest) for f in (0.5, 0.9, 0.95, 0.99)]
    return LatencyStats(p50=q[0], p90=q[1], p95=q[2], p99=q[3], mean=total / n), float(biggest)
