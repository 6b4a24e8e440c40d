"""The arrival-time figures of the `requests` table: its span, the mean and peak (1 s, 60 s)
rates and their ratios, the inter-arrival CV, and the rate series with its window; with the
warnings for a clock too coarse for the per-second figures and for a span no clock means. A trace
without timestamps gets None for each.
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

import math
from typing import Any

from core.errors import TraceError
from profiler.analysis.scans import Scans
from profiler.schema import REQUESTS_TABLE, RateSeries

RATE_WINDOWS_S: tuple[int, ...] = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400)
MAX_RATE_POINTS = 2_000
# Arrival times spread wider than this are no clock a trace was logged with (1e17 s asked
# for an 8 TiB array of windows; 1e300 overflows every integer the windows are counted in).
MAX_SPAN_S = 1e12  # ~31,700 years

_SPAN_SQL = f"SELECT count(arrival_s), max(arrival_s) - min(arrival_s) FROM {REQUESTS_TABLE}"

# The table is stored in request_id order and DuckDB preserves insertion order, so a streaming
# lag over () sees arrival order without a sort (Spark gets ORDER BY request_id: spark_sql).
# Besides the CV: the smallest step between distinct arrival times and the share of arrivals
# at the same instant as the one before, which tell a coarse clock from the traffic.
_GAPS_CV_SQL = f"""
SELECT stddev_pop(gap) / avg(gap),
       min(CASE WHEN gap > 0 THEN gap END),
       avg(CASE WHEN gap = 0 THEN 1.0 ELSE 0.0 END)
FROM (
    SELECT arrival_s - lag(arrival_s) OVER () AS gap
    FROM {REQUESTS_TABLE} WHERE arrival_s IS NOT NULL
) WHERE gap IS NOT NULL
"""

# A clock this coarse, with at least this share of arrivals tied, makes the 1 s figures and
# the CV describe the timestamps' resolution (Mooncake's come in 3 s steps).
COARSE_CLOCK_STEP_S = 1.0
COARSE_CLOCK_TIED_SHARE = 0.5

# One pass over the trace into per-second counts; the 1 s and 60 s peaks and the (dense) rate
# series of `?`-second windows all come from that small table: floor(t / w) = floor(t) // w
# for whole-second windows. sum(x::BIGINT)::BIGINT takes DuckDB's fast non-HUGEINT path.
# MATERIALIZED: per_s is read three times, and DuckDB would otherwise aggregate it three times.
# The dense window list is an unnested range() in a subquery (not the range() table function),
# which `profiler.analysis.spark_sql` transpiles to Spark's explode(sequence(…)).
_WINDOWS_SQL = f"""
WITH per_s AS MATERIALIZED (
    SELECT floor(arrival_s)::BIGINT AS s, count(*) AS n,
           sum(input_tokens::BIGINT)::BIGINT AS i, sum(output_tokens::BIGINT)::BIGINT AS o
    FROM {REQUESTS_TABLE} WHERE arrival_s IS NOT NULL GROUP BY s
),
per_w AS (
    SELECT s // ? AS w, sum(n)::BIGINT AS n, sum(i)::BIGINT AS i, sum(o)::BIGINT AS o
    FROM per_s GROUP BY w
)
SELECT g.w, coalesce(n, 0), coalesce(i, 0), coalesce(o, 0),
       (SELECT max(n) FROM per_s),
       (SELECT max(c) FROM (SELECT sum(n) AS c FROM per_s GROUP BY s // 60))
FROM (SELECT unnest(range(0, (SELECT max(w) + 1 FROM per_w))) AS w) g
LEFT JOIN per_w USING (w) ORDER BY g.w
"""


def timing_figures(
    con: Any, warnings: list[str], scans: Scans
) -> tuple[dict[str, float | None], RateSeries | None]:
    """The `Profile` timing fields (each None without timestamps) and the rate series (None
    when the arrivals span no time); the warnings are appended to `warnings`."""
    keys = ("duration_s", "mean_qps", "peak_qps_1s", "peak_qps_60s", "peak_to_mean_1s",
            "peak_to_mean_60s", "interarrival_cv")
    n_timed, duration = con.execute(_SPAN_SQL).fetchone()
    if not n_timed:
        return dict.fromkeys(keys), None
    window = _rate_window(float(duration))
    if duration > 100 * 365.25 * 86400:
        warnings.append(f"arrival times span {duration / (365.25 * 86400):,.0f} years: "
                        "timestamps from different clocks or units?")
    rows = scans.rate_windows(con, window, duration)
    if rows is None:  # not in arrival order (an older workspace), or not DuckDB: SQL
        rows = con.execute(_WINDOWS_SQL, [window]).fetchall()
    peak1, peak60 = float(rows[0][4]), rows[0][5] / 60.0
    cv, step, tied = con.execute(_GAPS_CV_SQL).fetchone()
    if clock := _coarse_clock(step, tied):
        warnings.append(clock)
    mean = n_timed / duration if duration else None
    if not duration:
        warnings.append("all requests arrive at the same instant: rates are undefined")
    timing = {
        "duration_s": float(duration),
        "mean_qps": mean,
        "peak_qps_1s": peak1,
        "peak_qps_60s": peak60,
        "peak_to_mean_1s": peak1 / mean if mean else None,
        "peak_to_mean_60s": peak60 / mean if mean else None,
        "interarrival_cv": None if cv is None else float(cv),
    }
    series = RateSeries(
        window_s=window,
        t_s=[float(r[0]) * window for r in rows],
        requests=[int(r[1]) for r in rows],
        input_tokens=[int(r[2]) for r in rows],
        output_tokens=[int(r[3]) for r in rows],
    ) if duration else None
    return timing, series


def _coarse_clock(step_s: float | None, tied_share: float | None) -> str | None:
    """The warning for timestamps too coarse for the per-second figures, else None."""
    if step_s is None or tied_share is None or step_s < COARSE_CLOCK_STEP_S * 0.999 \
            or tied_share < COARSE_CLOCK_TIED_SHARE:
        return None
    figures = ("the 1 s peak, its peak-to-mean and the inter-arrival CV"
               if step_s > COARSE_CLOCK_STEP_S * 1.001 else "the inter-arrival CV")
    return (f"arrival times come in steps of {step_s:,.4g} s and {tied_share:.0%} of requests "
            f"arrive at the same instant as the one before: {figures} describe the clock's "
            "resolution, not the traffic; read the 60 s figures")


def _rate_window(duration_s: float) -> int:
    """The rate series' window: the shortest of RATE_WINDOWS_S giving at most
    MAX_RATE_POINTS points, else whole multiples of the longest (a two-row trace dated 1970
    and 9999 wrote a 142 MB profile of daily windows).

    Raises:
        TraceError: a span no clock means (non-finite, or beyond MAX_SPAN_S).
    """
    if not math.isfinite(duration_s) or duration_s > MAX_SPAN_S:
        raise TraceError(f"arrival times span {duration_s:.3g} s: no trace's clock; check the "
                         "time column and its unit (--time-unit)")
    fitting = next((w for w in RATE_WINDOWS_S if duration_s / w <= MAX_RATE_POINTS), None)
    if fitting is not None:
        return fitting
    longest = RATE_WINDOWS_S[-1]
    return longest * math.ceil(duration_s / (longest * MAX_RATE_POINTS))
