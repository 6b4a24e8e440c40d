"""Analyses of the shaped workloads, each from the rows of one measured run: where a
concurrency sweep stops paying (the knee, `find_knee`), how high a burst spikes TTFT and how
long it takes to recover (`analyze_burst`), and how a soak drifts between its first and last
windows (`analyze_soak`). The run's summary itself lives in `runners.benchmark.metrics`.

Times are seconds on the results' clock; `t0` is the run start on that clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from core.figures import latency_of
from core.records import Record
from runners.benchmark.metrics import DEFAULT_WINDOW_S
from runners.load.schemas import RequestResult

# Knee: the step to the next concurrency level buys < KNEE_GAIN_PCT % more throughput while
# median E2E latency grows > KNEE_LATENCY_PCT %.
KNEE_GAIN_PCT = 10.0
KNEE_LATENCY_PCT = 20.0
BURST_BAND = 0.25  # recovered = windowed TTFT p50 back within +25 % of the steady baseline
SOAK_WINDOWS = 10


# -- sweep -------------------------------------------------------------------------------------


class SweepLevel(Record):
    """One concurrency level of a sweep."""

    concurrency: int = Field(ge=1)
    request_throughput_rps: float
    output_throughput_tok_s: float
    e2e_p50_s: float | None
    ttft_p95_s: float | None


class Knee(Record):
    """Where more concurrency stops paying (see `find_knee`)."""

    knee_concurrency: int | None = Field(description="Last level worth running; None = not "
                                         "reached within the levels measured.")
    past_knee: bool = Field(description="A step past the knee was measured.")
    gain_pct: float = Field(description="Throughput-gain threshold, %.")
    latency_pct: float = Field(description="Latency-growth threshold, %.")


def find_knee(
    levels: Sequence[SweepLevel],
    *,
    gain_pct: float = KNEE_GAIN_PCT,
    latency_pct: float = KNEE_LATENCY_PCT,
) -> Knee:
    """The knee of a concurrency sweep.

    Definition: levels in increasing concurrency; step i (level i−1 → i) is *flat* when output
    throughput grows by less than `gain_pct` % while median E2E latency grows by more than
    `latency_pct` %. The knee is level i−1 of the first flat step: the highest concurrency
    whose throughput still justified its latency. No flat step → no knee yet.
    """
    ordered = sorted(levels, key=lambda lv: lv.concurrency)
    for prev, cur in itertools.pairwise(ordered):
        if _flat(prev, cur, gain_pct, latency_pct):
            return Knee(knee_concurrency=prev.concurrency, past_knee=True, gain_pct=gain_pct,
                        latency_pct=latency_pct)
    return Knee(knee_concurrency=None, past_knee=False, gain_pct=gain_pct,
                latency_pct=latency_pct)


def _flat(prev: SweepLevel, cur: SweepLevel, gain_pct: float, latency_pct: float) -> bool:
    if prev.output_throughput_tok_s <= 0 or not prev.e2e_p50_s or cur.e2e_p50_s is None:
        return False
    gain = (cur.output_throughput_tok_s / prev.output_throughput_tok_s - 1) * 100
    growth = (cur.e2e_p50_s / prev.e2e_p50_s - 1) * 100
    return gain < gain_pct and growth > latency_pct


# -- burst -------------------------------------------------------------------------------------


class BurstAnalysis(Record):
    """Spike and recovery of a steady → burst → steady run (times since the run began)."""

    baseline_ttft_p50_s: float | None = Field(description="Median TTFT, first steady phase.")
    peak_ttft_p50_s: float | None = Field(description="Highest windowed TTFT p50 from the "
                                          "burst on.")
    ttft_spike_ratio: float | None = Field(description="peak / baseline.")
    baseline_queue_depth: float | None = Field(description="Mean scraped queue depth, steady.")
    peak_queue_depth: float | None = Field(description="Highest scraped queue depth from the "
                                           "burst on.")
    recovery_s: float | None = Field(description="Burst end → start of the first window after "
                                     "which every window is within the band; None = never.")
    band: float = Field(description="Relative band around the baseline counted as recovered.")


def analyze_burst(
    results: Sequence[RequestResult],
    *,
    t0: float,
    burst_start_s: float,
    burst_end_s: float,
    queue_depth: Sequence[tuple[float, float]] = (),
    window_s: float = DEFAULT_WINDOW_S,
    band: float = BURST_BAND,
) -> BurstAnalysis:
    """Spike height and recovery time; requests are placed by send time (`t0` = run start).

    `queue_depth` holds (seconds since run start, depth) scrape samples.
    """
    rows = [(r.sent_at_s - t0, r.ttft_s) for r in results if r.success and r.ttft_s is not None]
    base = [ttft for t, ttft in rows if t < burst_start_s]
    baseline = float(np.median(base)) if base else None
    windows = _windowed_p50([(t, v) for t, v in rows if t >= burst_start_s], burst_start_s,
                            window_s)
    peak = max((v for _, v in windows), default=None)
    q_base = [d for t, d in queue_depth if t < burst_start_s]
    q_after = [d for t, d in queue_depth if t >= burst_start_s]
    return BurstAnalysis(
        baseline_ttft_p50_s=baseline, peak_ttft_p50_s=peak,
        ttft_spike_ratio=peak / baseline if peak is not None and baseline else None,
        baseline_queue_depth=float(np.mean(q_base)) if q_base else None,
        peak_queue_depth=max(q_after) if q_after else None,
        recovery_s=_recovery(windows, baseline, burst_end_s, band), band=band)


def _windowed_p50(rows: Sequence[tuple[float, float]], start_s: float,
                  window_s: float) -> list[tuple[float, float]]:
    """(window start, median value) for each non-empty window from `start_s`."""
    groups: dict[int, list[float]] = {}
    for t, v in rows:
        groups.setdefault(int((t - start_s) // window_s), []).append(v)
    return [(start_s + k * window_s, float(np.median(groups[k]))) for k in sorted(groups)]


def _recovery(windows: Sequence[tuple[float, float]], baseline: float | None,
              burst_end_s: float, band: float) -> float | None:
    if baseline is None:
        return None
    after = [(t, v) for t, v in windows if t >= burst_end_s]
    if not after or after[-1][1] > baseline * (1 + band):
        return None  # still outside the band at the last window measured
    first_ok = after[-1][0]
    for t, v in reversed(after):
        if v > baseline * (1 + band):
            break
        first_ok = t
    return first_ok - burst_end_s


# -- soak --------------------------------------------------------------------------------------


class SoakAnalysis(Record):
    """Drift between the first and the last of `windows` equal windows of a long run."""

    windows: int
    first_ttft_p50_s: float | None
    last_ttft_p50_s: float | None
    first_ttft_p95_s: float | None
    last_ttft_p95_s: float | None
    ttft_p50_ratio: float | None = Field(description="last / first window TTFT p50.")
    ttft_p95_ratio: float | None = Field(description="last / first window TTFT p95.")
    first_throughput_rps: float
    last_throughput_rps: float
    throughput_ratio: float | None = Field(description="last / first window completions/s.")
    ttft_p50_slope_s_per_s: float | None = Field(
        description="Least-squares slope of per-window TTFT p50 over window start time.")


def analyze_soak(
    results: Sequence[RequestResult], *, t0: float, t1: float, windows: int = SOAK_WINDOWS
) -> SoakAnalysis:
    """TTFT (by send time) and completions/s (by end time) per window; first vs last."""
    width = (t1 - t0) / windows if t1 > t0 else 0.0
    ok = [r for r in results if r.success and r.ttft_s is not None]

    def idx(t: float) -> int:
        return min(windows - 1, max(0, int((t - t0) // width))) if width else 0

    ttfts: list[list[float]] = [[] for _ in range(windows)]
    done = [0] * windows
    for r in ok:
        ttfts[idx(r.sent_at_s)].append(r.ttft_s)  # type: ignore[arg-type]
        done[idx(r.end_at_s)] += 1
    first, last = latency_of(ttfts[0]), latency_of(ttfts[-1])
    tput = [d / width if width else 0.0 for d in done]
    mids = [(i, float(np.median(v))) for i, v in enumerate(ttfts) if v]
    slope = (float(np.polyfit([i * width for i, _ in mids], [m for _, m in mids], 1)[0])
             if len(mids) >= 2 and width else None)
    return SoakAnalysis(
        windows=windows, first_ttft_p50_s=first.p50, last_ttft_p50_s=last.p50,
        first_ttft_p95_s=first.p95, last_ttft_p95_s=last.p95,
        ttft_p50_ratio=_ratio(last.p50, first.p50), ttft_p95_ratio=_ratio(last.p95, first.p95),
        first_throughput_rps=tput[0], last_throughput_rps=tput[-1],
        throughput_ratio=_ratio(tput[-1], tput[0]), ttft_p50_slope_s_per_s=slope)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
