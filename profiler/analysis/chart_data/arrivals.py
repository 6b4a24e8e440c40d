"""Arrivals over time, for the Profile view: requests per counting window (1 s, 60 s), in at
most MAX_SERIES_POINTS display buckets that keep each bucket's busiest window.
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from core.records import Record
from profiler.schema import REQUESTS_TABLE

MAX_SERIES_POINTS = 5_000

_SERIES_SQL = f"""
WITH per_w AS (
    SELECT floor(arrival_s / ?)::BIGINT AS w, count(*) AS n
    FROM {REQUESTS_TABLE} WHERE arrival_s IS NOT NULL GROUP BY w
),
per_b AS (SELECT w // ? AS b, sum(n)::BIGINT AS n, max(n) AS peak FROM per_w GROUP BY b)
SELECT g.b, coalesce(n, 0), coalesce(peak, 0)
FROM range(0, (SELECT max(b) + 1 FROM per_b)) g(b) LEFT JOIN per_b USING (b) ORDER BY g.b
"""


class ArrivalSeries(Record):
    """Requests per counting window, shown in display buckets of whole windows.

    When the trace spans more than MAX_SERIES_POINTS windows, each point covers several
    windows: `mean_rps` is the bucket's requests over its length, `peak_rps` its busiest
    window, so a downsampled chart still shows the peaks.
    """

    window_s: float = Field(description="counting window, aligned to t = 0")
    bucket_s: float = Field(description="display bucket (a whole number of windows)")
    t_s: list[float] = Field(description="bucket start times")
    mean_rps: list[float]
    peak_rps: list[float]


def arrival_series(con: Any, window_s: float) -> ArrivalSeries | None:
    """Requests per `window_s` window; None when the trace has no timestamps."""
    (t_max,) = con.execute(f"SELECT max(arrival_s) FROM {REQUESTS_TABLE}").fetchone()
    if t_max is None:
        return None
    n_windows = math.floor(t_max / window_s) + 1
    per_bucket = max(1, math.ceil(n_windows / MAX_SERIES_POINTS))
    bucket_s = per_bucket * window_s
    rows = con.execute(_SERIES_SQL, [window_s, per_bucket]).fetchall()
    return ArrivalSeries(
        window_s=window_s,
        bucket_s=bucket_s,
        t_s=[b * bucket_s for b, _, _ in rows],
        mean_rps=[n / bucket_s for _, n, _ in rows],
        peak_rps=[peak / window_s for _, _, peak in rows],
    )
