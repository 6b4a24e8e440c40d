"""Log-binned distributions, for the Profile view: the inter-arrival gaps and the input and
output lengths as histograms with their cumulative distributions, and the (input, output)
lengths as a log-log heatmap.

Log-binned histograms use `k` bins per power of ten: bin i holds values in
[10^(i/k), 10^((i+1)/k)); values <= 0 (zero tokens, zero gaps) are counted apart as `zeros`.
"""

# ruff: noqa: S608 - SQL is composed only of the constant REQUESTS_TABLE and constant column
# expressions chosen from _LENGTH_COLUMNS; every value is a bound parameter.

from __future__ import annotations

from typing import Any

from pydantic import Field

from core.records import Record
from profiler.schema import REQUESTS_TABLE

LOG_BINS_PER_DECADE = 10
HEATMAP_BINS_PER_DECADE = 5

_LENGTH_COLUMNS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens"}

# Gaps are rounded to the nanosecond: differences of float seconds otherwise put a gap of
# exactly 0.1 s a hair below the bin edge 10^-1.
_GAPS_SQL = f"""(
    SELECT round(arrival_s - lag(arrival_s) OVER (ORDER BY request_id), 9) AS v
    FROM {REQUESTS_TABLE} WHERE arrival_s IS NOT NULL)"""

_HIST_SQL = """
SELECT CASE WHEN v > 0 THEN floor(log10(v) * ?)::BIGINT END AS i, count(*)
FROM {source} WHERE v IS NOT NULL GROUP BY i ORDER BY i NULLS FIRST
"""

_HEATMAP_SQL = f"""
SELECT floor(log10(greatest(input_tokens, 1)) * ?)::BIGINT AS x,
       floor(log10(greatest(output_tokens, 1)) * ?)::BIGINT AS y, count(*)
FROM {REQUESTS_TABLE} GROUP BY x, y
"""


class LogHistogram(Record):
    """A histogram on log-spaced bins, with its cumulative distribution."""

    bins_per_decade: int
    total: int
    zeros: int = Field(description="values <= 0, outside the log bins")
    lower: list[float] = Field(description="bin lower edges, 10^(i/k)")
    upper: list[float]
    counts: list[int]
    cdf: list[float] = Field(description="fraction of all values below each upper edge")


class Heatmap(Record):
    """Counts of requests on a log-log grid of (input, output) tokens; zero counts as 1."""

    bins_per_decade: int
    x_lower: list[float] = Field(description="input-token bin lower edges")
    y_lower: list[float] = Field(description="output-token bin lower edges")
    counts: list[list[int]] = Field(description="counts[y][x]")


def interarrival_histogram(con: Any, bins_per_decade: int = LOG_BINS_PER_DECADE
                           ) -> LogHistogram | None:
    """Gaps between consecutive arrivals (s); None with fewer than two timed requests."""
    hist = _log_histogram(con, _GAPS_SQL, bins_per_decade)
    return hist if hist.total else None


def length_histogram(con: Any, column: str, bins_per_decade: int = LOG_BINS_PER_DECADE
                     ) -> LogHistogram:
    """Distribution of `input_tokens` or `output_tokens` on log bins."""
    expression = _LENGTH_COLUMNS.get(column)
    if expression is None:
        raise ValueError(f"column must be one of {', '.join(_LENGTH_COLUMNS)}, not {column!r}")
    source = f"(SELECT {expression} AS v FROM {REQUESTS_TABLE})"
    return _log_histogram(con, source, bins_per_decade)


def _log_histogram(con: Any, source: str, k: int) -> LogHistogram:
    rows = con.execute(_HIST_SQL.format(source=source), [k]).fetchall()
    zeros = sum(n for i, n in rows if i is None)
    by_bin = {int(i): int(n) for i, n in rows if i is not None}
    total = zeros + sum(by_bin.values())
    bins = list(range(min(by_bin), max(by_bin) + 1)) if by_bin else []
    counts = [by_bin.get(i, 0) for i in bins]
    cdf, running = [], zeros
    for n in counts:
        running += n
        cdf.append(running / total)
    return LogHistogram(bins_per_decade=k, total=total, zeros=zeros,
                        lower=[10 ** (i / k) for i in bins],
                        upper=[10 ** ((i + 1) / k) for i in bins], counts=counts, cdf=cdf)


def length_heatmap(con: Any, bins_per_decade: int = HEATMAP_BINS_PER_DECADE) -> Heatmap:
    """Requests on a log-log (input, output) grid; empty grid for an empty table."""
    k = bins_per_decade
    rows = con.execute(_HEATMAP_SQL, [k, k]).fetchall()
    if not rows:
        return Heatmap(bins_per_decade=k, x_lower=[], y_lower=[], counts=[])
    xs = range(min(r[0] for r in rows), max(r[0] for r in rows) + 1)
    ys = range(min(r[1] for r in rows), max(r[1] for r in rows) + 1)
    counts = [[0] * len(xs) for _ in ys]
    for x, y, n in rows:
        counts[y - ys.start][x - xs.start] = int(n)
    return Heatmap(bins_per_decade=k, x_lower=[10 ** (x / k) for x in xs],
                   y_lower=[10 ** (y / k) for y in ys], counts=counts)
