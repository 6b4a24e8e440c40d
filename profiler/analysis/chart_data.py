"""Chart-ready summaries of the workspace's `requests` table, for the web app's Profile view.

Each query runs in DuckDB with bound parameters and returns a small typed record (at most a few
thousand numbers), so a chart never needs the trace in memory. Log-binned histograms use `k`
bins per power of ten: bin i holds values in [10^(i/k), 10^((i+1)/k)); values <= 0 (zero
tokens, zero gaps) are counted apart as `zeros`.
"""

# ruff: noqa: S608 - SQL is composed only of the constant REQUESTS_TABLE and constant column
# expressions chosen from _LENGTH_COLUMNS; every value is a bound parameter.

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from core.records import Record
from profiler.schema import REQUESTS_TABLE, Segment
from profiler.workspace import Workspace

LOG_BINS_PER_DECADE = 10
HEATMAP_BINS_PER_DECADE = 5
MAX_SERIES_POINTS = 5_000
# Capacities of the reuse curve: 1, 2, 5 x 10^k blocks up to the trace's distinct blocks.
REUSE_STEPS = (1, 2, 5)
REUSE_MIN_BLOCKS = 10
OUTLINE_SIGMAS = 2.0
OUTLINE_POINTS = 64

_LENGTH_COLUMNS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens"}

_SERIES_SQL = f"""
WITH per_w AS (
    SELECT floor(arrival_s / ?)::BIGINT AS w, count(*) AS n
    FROM {REQUESTS_TABLE} WHERE arrival_s IS NOT NULL GROUP BY w
),
per_b AS (SELECT w // ? AS b, sum(n)::BIGINT AS n, max(n) AS peak FROM per_w GROUP BY b)
SELECT g.b, coalesce(n, 0), coalesce(peak, 0)
FROM range(0, (SELECT max(b) + 1 FROM per_b)) g(b) LEFT JOIN per_b USING (b) ORDER BY g.b
"""

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

_BLOCKS_SQL = f"""
SELECT count(DISTINCT h), min(bs), max(bs) FROM (
    SELECT unnest(block_hashes) AS h, block_size AS bs FROM {REQUESTS_TABLE}
    WHERE block_hashes IS NOT NULL)
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


class ReuseCurve(Record):
    """Prefix-cache hit ratio of an LRU block cache against its size."""

    block_size: int | None = Field(description="tokens per block, when the trace has one")
    distinct_blocks: int = Field(description="beyond this size nothing is ever evicted")
    capacity_blocks: list[int]
    hit_ratio: list[float]
    infinite_hit_ratio: float


# The most models the split lists one by one; the rest are summed as one row.
MAX_MODELS = 12

_MODELS_SQL = f"""
SELECT model, count(*), quantile_cont(input_tokens, 0.5), quantile_cont(output_tokens, 0.5),
       sum(input_tokens)::BIGINT, sum(output_tokens)::BIGINT
FROM {REQUESTS_TABLE} WHERE model IS NOT NULL GROUP BY model ORDER BY count(*) DESC, model
"""


class ModelShare(Record):
    """One model's part of a trace that names the model of each request."""

    model: str = Field(description="as the trace names it; 'other (N models)' sums the rest")
    requests: int
    share: float = Field(description="of the requests that name a model")
    input_tokens_p50: float | None = Field(description="None on the summed row")
    output_tokens_p50: float | None
    input_tokens_total: int
    output_tokens_total: int


class ChartData(Record):
    """Everything the Profile view draws, computed from one workspace."""

    arrivals_1s: ArrivalSeries | None
    arrivals_60s: ArrivalSeries | None
    interarrival_s: LogHistogram | None
    input_tokens: LogHistogram
    output_tokens: LogHistogram
    lengths_2d: Heatmap
    prefix_reuse: ReuseCurve | None
    models: list[ModelShare] | None = Field(
        default=None, description="per-model split; None unless two or more models appear")


class SegmentOutline(Record):
    """A segment's ellipse (mean +/- OUTLINE_SIGMAS in log space), in tokens, to draw."""

    share: float
    input_tokens_p50: float
    output_tokens_p50: float
    input_tokens: list[float]
    output_tokens: list[float]


def chart_data(workspace: Workspace) -> ChartData:
    """Every chart record of the workspace's current trace (opened read-only).

    Raises:
        WorkspaceError: the workspace does not exist.
    """
    with workspace.connect(read_only=True) as con:
        return ChartData(
            arrivals_1s=arrival_series(con, 1.0),
            arrivals_60s=arrival_series(con, 60.0),
            interarrival_s=interarrival_histogram(con),
            input_tokens=length_histogram(con, "input_tokens"),
            output_tokens=length_histogram(con, "output_tokens"),
            lengths_2d=length_heatmap(con),
            prefix_reuse=reuse_curve(con),
            models=model_split(con),
        )


def model_split(con: Any) -> list[ModelShare] | None:
    """Requests and lengths per model, busiest first (past MAX_MODELS, one summed row);
    None when fewer than two models are named."""
    rows = con.execute(_MODELS_SQL).fetchall()
    if len(rows) < 2:
        return None
    total = sum(r[1] for r in rows)
    out = [ModelShare(model=str(m), requests=n, share=n / total, input_tokens_p50=float(i),
                      output_tokens_p50=float(o), input_tokens_total=int(si),
                      output_tokens_total=int(so))
           for m, n, i, o, si, so in rows[:MAX_MODELS]]
    rest = rows[MAX_MODELS:]
    if rest:
        n = sum(r[1] for r in rest)
        out.append(ModelShare(model=f"other ({len(rest)} models)", requests=n, share=n / total,
                              input_tokens_p50=None, output_tokens_p50=None,
                              input_tokens_total=sum(int(r[4]) for r in rest),
                              output_tokens_total=sum(int(r[5]) for r in rest)))
    return out


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


def reuse_capacities(distinct_blocks: int) -> list[int]:
    """1, 2, 5 x 10^k block capacities from REUSE_MIN_BLOCKS, ending at `distinct_blocks`."""
    capacities, decade = [], REUSE_MIN_BLOCKS
    while decade < distinct_blocks:
        capacities += [s * decade for s in REUSE_STEPS if s * decade < distinct_blocks]
        decade *= 10
    return [*capacities, distinct_blocks]


def reuse_curve(con: Any, capacities: Sequence[int] | None = None) -> ReuseCurve | None:
    """LRU hit ratio (profiler.analysis.prefix semantics) per cache size; None without block hashes.

    Default sizes: `reuse_capacities` of the trace's distinct blocks, where the curve meets
    the infinite-cache ratio.
    """
    distinct, bs_min, bs_max = con.execute(_BLOCKS_SQL).fetchone()
    if not distinct:
        return None
    from profiler.analysis.prefix import infinite_hit_ratio, lru_hit_ratios
    from profiler.analysis.profile import flat_hashes

    hashes, offsets = flat_hashes(con)
    chosen = list(capacities) if capacities is not None else reuse_capacities(int(distinct))
    ratios = lru_hit_ratios(hashes, offsets, chosen)
    return ReuseCurve(
        block_size=int(bs_min) if bs_min is not None and bs_min == bs_max else None,
        distinct_blocks=int(distinct),
        capacity_blocks=chosen,
        hit_ratio=[float(ratios[c]) for c in chosen],
        infinite_hit_ratio=float(infinite_hit_ratio(hashes, offsets)),
    )


def segment_outlines(segments: Sequence[Segment]) -> list[SegmentOutline]:
    """Each segment's OUTLINE_SIGMAS ellipse of (ln(1 + input), ln(1 + output)), in tokens."""
    import numpy as np

    angle = np.linspace(0.0, 2.0 * np.pi, OUTLINE_POINTS)
    circle = np.stack([np.cos(angle), np.sin(angle)])
    outlines = []
    for seg in segments:
        values, vectors = np.linalg.eigh(np.asarray(seg.log_cov, dtype=float))
        axes = vectors * np.sqrt(np.clip(values, 0.0, None))
        points = OUTLINE_SIGMAS * axes @ circle + [[seg.log_input_mean], [seg.log_output_mean]]
        tokens = np.expm1(points)
        outlines.append(SegmentOutline(
            share=seg.share, input_tokens_p50=seg.input_tokens_p50,
            output_tokens_p50=seg.output_tokens_p50,
            input_tokens=tokens[0].tolist(), output_tokens=tokens[1].tolist()))
    return outlines
