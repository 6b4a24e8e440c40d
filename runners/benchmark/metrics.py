"""Figures of a measured run: the summary (latency distributions, throughput, goodput, peak
concurrency, per-second series), its `bench --json` view (`summary_json`), and whether the
run failed (`run_failure`); not the sweep, burst and soak analyses (`runners.benchmark.analyses`).

Inputs are `RequestResult` rows whose stamps share one clock (`time.perf_counter()`, or the
store's run-relative seconds). Percentiles interpolate linearly (numpy's default, as the
profile does). Seconds everywhere; `summary_json` is the one place that writes milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from core.figures import ServingFigures, latency_of, meets_slos
from core.records import Record
from runners.load.failures import one_line
from runners.load.schemas import RequestResult

DEFAULT_WINDOW_S = 1.0
# A run whose finished requests failed more often than this measured its errors, not the
# server's latency: it is stored `failed` (and `bench` exits 1). One in ten leaves room for a
# few timeouts at the edge of an overload test while catching a broken server or config.
FAILED_ERROR_RATE = 0.10


class SeriesPoint(Record):
    """One window of the run (start `t_s` seconds after the run began)."""

    t_s: float = Field(description="Window start, seconds since the run began.")
    completions: int = Field(description="Successful requests that ended in the window.")
    output_tokens: int = Field(description="Output tokens of those requests.")
    ttft_p50_s: float | None = Field(description="Median TTFT of requests sent in the window.")
    in_flight: float = Field(description="Time-averaged requests in flight over the window.")


class Summary(ServingFigures):
    """What a run measured (DESIGN §3): the shared serving figures (latencies, throughputs,
    goodput; `band` stays None for a measurement) and what only a measured run has."""

    count: int = Field(description="Requests sent.")
    completed: int = Field(description="Requests that succeeded.")
    errors: dict[str, int] = Field(description="Failed requests by error kind.")
    error_rate: float = Field(description="Failed / sent (0 when none were sent).")
    missing_usage: int = Field(description="Successes whose stream carried no usage counts.")
    duration_s: float = Field(description="Run start → last request end.")
    achieved_rate_rps: float | None = Field(
        description="(sent − 1) / (last send − first send): the arrival rate actually produced.")
    # A run always has a goodput (every success counts when no SLO is given): not optional here.
    goodput_rps: float = Field(ge=0, description="Successes meeting every SLO / duration_s.")
    slo_ttft_s: float | None = Field(description="Per-request TTFT bound used for goodput.")
    slo_tpot_s: float | None = Field(description="Per-request TPOT bound used for goodput.")
    peak_concurrency: int = Field(description="Most requests in flight at once.")
    window_s: float = Field(description="Width of the series windows.")
    series: list[SeriesPoint] = Field(default_factory=list)


def summarize(
    results: Sequence[RequestResult],
    *,
    started_at_s: float | None = None,
    ended_at_s: float | None = None,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
) -> Summary:
    """The summary of `results` (stamps on one clock).

    Args:
        results: every request sent, failures included.
        started_at_s: run start on the stamps' clock (default: the first send).
        ended_at_s: run end (default: the last request end).
        slo_ttft_s, slo_tpot_s: per-request bounds for goodput (None = no bound). A success
            with fewer than two output tokens has no TPOT and meets any TPOT bound.
        window_s: width of the series windows.
    """
    ok = [r for r in results if r.success]
    t0 = started_at_s if started_at_s is not None else _first(r.sent_at_s for r in results)
    t1 = ended_at_s if ended_at_s is not None else _last(r.end_at_s for r in results)
    duration = max(t1 - t0, 0.0)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    all_tokens = out_tokens + sum(r.prompt_tokens or 0 for r in ok)
    good = int(meets_slos([math.nan if r.ttft_s is None else r.ttft_s for r in ok],
                          [math.nan if r.tpot_s is None else r.tpot_s for r in ok],
                          slo_ttft_s, slo_tpot_s).sum())
    return Summary(
        count=len(results),
        completed=len(ok),
        errors=dict(Counter(r.error_kind or "unknown" for r in results if not r.success)),
        error_rate=(len(results) - len(ok)) / len(results) if results else 0.0,
        missing_usage=sum(1 for r in ok if r.output_tokens is None),
        duration_s=duration,
        ttft_s=latency_of([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_s=latency_of([r.tpot_s for r in ok if r.tpot_s is not None]),
        itl_s=latency_of([gap for r in ok for gap in r.itl_s]),
        e2e_s=latency_of([r.e2e_s for r in ok if r.e2e_s is not None]),
        request_throughput_rps=_per_s(len(ok), duration),
        output_throughput_tok_s=_per_s(out_tokens, duration),
        total_throughput_tok_s=_per_s(all_tokens, duration),
        achieved_rate_rps=achieved_rate(results),
        goodput_rps=_per_s(good, duration),
        slo_ttft_s=slo_ttft_s,
        slo_tpot_s=slo_tpot_s,
        peak_concurrency=peak_concurrency(results),
        window_s=window_s,
        series=series(results, t0, t1, window_s),
    )


def _first(values: object) -> float:
    return min(values, default=0.0)  # type: ignore[call-overload]


def _last(values: object) -> float:
    return max(values, default=0.0)  # type: ignore[call-overload]


def _per_s(n: float, duration_s: float) -> float:
    return n / duration_s if duration_s > 0 else 0.0


def achieved_rate(results: Sequence[RequestResult]) -> float | None:
    """(n − 1) / (last send − first send); None with fewer than two sends or zero span."""
    sends = [r.sent_at_s for r in results]
    if len(sends) < 2 or max(sends) <= min(sends):
        return None
    return (len(sends) - 1) / (max(sends) - min(sends))


def peak_concurrency(results: Sequence[RequestResult]) -> int:
    """Most requests in flight at once over [sent, end); an end at t frees before a send at t."""
    events = sorted([(r.sent_at_s, 1) for r in results] + [(r.end_at_s, -1) for r in results])
    level = peak = 0
    for _, step in events:  # (t, -1) sorts before (t, +1)
        level += step
        peak = max(peak, level)
    return peak


def series(
    results: Sequence[RequestResult], t0: float, t1: float, window_s: float
) -> list[SeriesPoint]:
    """Per-window completions, output tokens, TTFT p50 (by send time) and mean in-flight."""
    if not results or t1 <= t0 or window_s <= 0:
        return []
    n = max(1, math.ceil((t1 - t0) / window_s - 1e-9))
    starts = t0 + window_s * np.arange(n)
    sent = np.array([r.sent_at_s for r in results])
    end = np.array([r.end_at_s for r in results])
    overlap = np.clip(np.minimum(end[:, None], starts + window_s) - np.maximum(sent[:, None],
                                                                                 starts), 0, None)
    in_flight = overlap.sum(axis=0) / window_s
    ok = [r for r in results if r.success]
    done_w = _window_of([r.end_at_s for r in ok], t0, window_s, n)
    sent_w = _window_of([r.sent_at_s for r in ok], t0, window_s, n)
    points = []
    for w in range(n):
        mine = [r for r, d in zip(ok, done_w, strict=True) if d == w]
        ttfts = [r.ttft_s for r, s in zip(ok, sent_w, strict=True)
                 if s == w and r.ttft_s is not None]
        points.append(SeriesPoint(
            t_s=w * window_s, completions=len(mine),
            output_tokens=sum(r.output_tokens or 0 for r in mine),
            ttft_p50_s=float(np.median(ttfts)) if ttfts else None,
            in_flight=float(in_flight[w])))
    return points


def _window_of(times: Sequence[float], t0: float, window_s: float, n: int) -> list[int]:
    return [min(n - 1, max(0, int((t - t0) // window_s))) for t in times]


# -- JSON --------------------------------------------------------------------------------------


def summary_json(summary: Summary) -> dict[str, object]:
    """The `bench --json` summary: DESIGN §2.4 names (`predict`'s), latencies in ms; the
    serving figures through their one ms view (`ServingFigures.json_ms`)."""
    out: dict[str, object] = {
        "count": summary.count,
        "completed": summary.completed,
        "errors": summary.errors,
        "error_rate": summary.error_rate,
        "duration_s": summary.duration_s,
    }
    out.update(summary.json_ms())
    out["achieved_rate_rps"] = summary.achieved_rate_rps
    out["peak_concurrency"] = summary.peak_concurrency
    return out


def run_failure(results: Sequence[RequestResult]) -> str | None:
    """Why a run that ran to its end failed, naming the dominant error; None when it did not.

    It failed when no request succeeded, or when more than FAILED_ERROR_RATE of the requests
    that finished failed. Requests cancelled by a stop do not count: they say nothing of the
    server. No finished request at all (stopped before any ended) is not a failure.
    """
    finished = [r for r in results if r.error_kind != "cancelled"]
    failures = [r for r in finished if not r.success]
    if not failures or (len(failures) < len(finished)
                        and len(failures) <= FAILED_ERROR_RATE * len(finished)):
        return None
    kinds = Counter(r.error_kind or "unknown" for r in failures)
    kind, n = kinds.most_common(1)[0]
    example = next(r.error for r in failures if (r.error_kind or "unknown") == kind)
    head = ("no request succeeded" if len(failures) == len(finished) else
            f"{len(failures) / len(finished):.0%} of the requests failed "
            f"(more than {FAILED_ERROR_RATE:.0%})")
    return one_line(f"{head}: {len(failures)} of {len(finished)} failed; most often {kind} "
                    f"({n}): {example or 'no message'}")
