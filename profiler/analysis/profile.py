"""The load profile of the workspace's `requests` table: every figure of DESIGN §2.2.

All figures are DuckDB SQL with bound parameters, except the two that need a sequential pass or
a model: the LRU prefix-cache simulation (`profiler.analysis.prefix`, compiled) and the length
segments
(`profiler.analysis.segments`, numpy k-means on a seeded sample, assigned to every row in SQL).

The same queries run on Spark (`profiler.analysis.spark_backend`, `profile --backend spark`),
transpiled
by `profiler.analysis.spark_sql`; `tests/profiler/analysis/test_spark_sql.py` checks each still
transpiles.
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import TraceError, UsageError, WorkspaceError
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.schema import REQUESTS_TABLE, FormatInfo, LengthStats, Profile, RateSeries
from profiler.workspace import Workspace

DEFAULT_LRU_CAPACITIES: tuple[int, ...] = (1_000, 10_000, 100_000)
RATE_WINDOWS_S: tuple[int, ...] = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400)
MAX_RATE_POINTS = 2_000
# Arrival times spread wider than this are no clock a trace was logged with (1e17 s asked
# for an 8 TiB array of windows; 1e300 overflows every integer the windows are counted in).
MAX_SPAN_S = 1e12  # ~31,700 years
PROFILE_SNIFF_BYTES = 4096

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

_SECONDS_SQL = f"""
SELECT floor(arrival_s)::BIGINT, input_tokens, output_tokens FROM {REQUESTS_TABLE}
WHERE arrival_s IS NOT NULL
"""
RATE_BATCH_ROWS = 1 << 18

_LENGTH_SQL = f"""
SELECT avg(input_tokens), max(input_tokens), min(input_tokens),
       avg(output_tokens), max(output_tokens), min(output_tokens)
FROM {REQUESTS_TABLE}
"""
PERCENTILES = (0.5, 0.9, 0.99)

_SESSION_SQL = f"""
SELECT CASE WHEN count(session_id) = 0 THEN NULL
            ELSE sum(CASE WHEN s.n >= 2 THEN 1 ELSE 0 END) / count(*) END
FROM {REQUESTS_TABLE} r LEFT JOIN (
    SELECT session_id AS sid, count(*) AS n FROM {REQUESTS_TABLE}
    WHERE session_id IS NOT NULL GROUP BY session_id
) s ON r.session_id = s.sid
"""

_REUSE_INFINITE_SQL = f"""
WITH b AS (
    SELECT request_id, unnest(block_hashes) AS h FROM {REQUESTS_TABLE}
    WHERE block_hashes IS NOT NULL
),
first AS (SELECT h, min(request_id) AS first_id FROM b GROUP BY h)
SELECT count(*), count(*) FILTER (WHERE b.request_id > first.first_id)
FROM b JOIN first USING (h)
"""

def profile_trace(
    path: str,
    *,
    workspace: Workspace,
    options: IngestOptions | None = None,
    lru_capacities: Sequence[int] = DEFAULT_LRU_CAPACITIES,
    seed: int = 0,
) -> Profile:
    """Ingest `path` into the workspace (replacing its trace), then profile it.

    Raises:
        TraceError: the trace is unreadable or invalid; the workspace is left as it was.
    """
    ingest(path, workspace, options)
    return compute_profile(workspace, lru_capacities=lru_capacities, seed=seed)


def load_profile_or_trace(
    source: str,
    *,
    workspace: Workspace,
    options: IngestOptions | None = None,
    seed: int = 0,
) -> Profile:
    """A saved profile.json as it is, or the profile of a trace (ingested into `workspace`)."""
    if _looks_like_profile(source):
        from pydantic import ValidationError

        try:
            return Profile.model_validate_json(Path(source).read_text(encoding="utf-8"))
        except (ValidationError, UnicodeDecodeError) as exc:
            raise UsageError(f"{source}: not a valid profile.json ({_first_error(exc)})") \
                from None
    return profile_trace(source, workspace=workspace, options=options, seed=seed)


def _looks_like_profile(source: str) -> bool:
    try:
        with open(source, "rb") as fh:
            head = fh.read(PROFILE_SNIFF_BYTES)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"n_requests"' in head


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    return str(exc)


def compute_profile(
    workspace: Workspace,
    *,
    lru_capacities: Sequence[int] = DEFAULT_LRU_CAPACITIES,
    seed: int = 0,
) -> Profile:
    """Profile the workspace's current trace.

    Raises:
        WorkspaceError: no trace has been ingested into this workspace.
    """
    with workspace.connect(read_only=True) as con:
        info, warnings = _meta(con)
        return _profile(con, info, warnings, lru_capacities, seed)


def _meta(con: Any) -> tuple[FormatInfo, list[str]]:
    try:
        row = con.execute("SELECT format_json, warnings_json FROM trace_meta").fetchone()
    except Exception:  # duckdb.CatalogException when no trace was ingested
        row = None
    if row is None:
        raise WorkspaceError("the workspace holds no trace: run `profile TRACE` first")
    return FormatInfo.model_validate_json(row[0]), list(json.loads(row[1]))


@dataclass(frozen=True)
class Scans:
    """The two reads that stream the trace's rows to Python instead of aggregating in SQL.

    `rate_windows(con, window_s, duration_s)` gives `_WINDOWS_SQL`'s rows, or None to run that
    query instead; `flat_hashes(con)` gives every block hash in request order (the LRU
    simulation's input). DuckDB's are `_rate_windows` and `flat_hashes`; another engine's
    backend (`profiler.analysis.spark_backend`) brings its own.
    """

    rate_windows: Callable[[Any, int, float], list[tuple[int, ...]] | None]
    flat_hashes: Callable[[Any], tuple[Any, Any]]


def _profile(
    con: Any, info: FormatInfo, warnings: list[str], capacities: Sequence[int], seed: int
) -> Profile:
    return profile_figures(con, info, warnings, lru_capacities=capacities, seed=seed,
                           scans=Scans(_rate_windows, flat_hashes))


def profile_figures(
    con: Any,
    info: FormatInfo,
    warnings: list[str],
    *,
    lru_capacities: Sequence[int],
    seed: int,
    scans: Scans,
) -> Profile:
    """Every figure of the `requests` table that `con` queries.

    `con` answers `execute(duckdb_sql, params)` with `fetchone()`/`fetchall()`: a DuckDB
    connection, or an adapter that runs the same SQL on another engine.
    """
    from profiler.analysis.segments import find_segments

    (n,) = con.execute(f"SELECT count(*) FROM {REQUESTS_TABLE}").fetchone()
    timing, rate_series = _timing(con, warnings, scans)
    reuse_inf, reuse_lru = _prefix_reuse(con, lru_capacities, scans)
    input_tokens, output_tokens = _lengths(con)
    return Profile(
        n_requests=int(n),
        **timing,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        multi_turn_share=_session_share(con),
        prefix_reuse_infinite=reuse_inf,
        prefix_reuse_lru=reuse_lru,
        segments=find_segments(con, seed=seed),
        rate_series=rate_series,
        format=info,
        warnings=warnings,
    )


def _timing(
    con: Any, warnings: list[str], scans: Scans
) -> tuple[dict[str, float | None], RateSeries | None]:
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


def _rate_windows(con: Any, window: int, duration: float) -> list[tuple[int, ...]] | None:
    """`_WINDOWS_SQL`'s rows in one streaming pass, or None if the rows are not in time order.

    The table is stored in arrival order, so each second's (and minute's) requests are one run
    of rows: run lengths give the 1 s and 60 s peaks without DuckDB hashing ~duration groups
    (1.8 M on the bench trace, the profile's costliest query), and the few rate windows are
    bincounts. Memory: one batch of rows and one slot per window.
    """
    n_windows = int(duration) // window + 1
    # A fresh cursor: the relation API refuses a connection with an unfinished result, and
    # it streams Arrow without the extra copy of a DB-API result.
    with con.cursor() as cur:
        return _scan_windows(cur.sql(_SECONDS_SQL).to_arrow_reader(RATE_BATCH_ROWS), window,
                             n_windows)


def _scan_windows(reader: Any, window: int, n_windows: int) -> list[tuple[int, ...]] | None:
    import numpy as np

    counts = np.zeros(n_windows, np.int64)
    inputs, outputs = np.zeros(n_windows, np.int64), np.zeros(n_windows, np.int64)
    runs = {1: _Runs(), 60: _Runs()}
    for batch in reader:
        sec = _ints(batch.column(0))
        if len(sec) == 0:
            continue
        if not runs[1].add(sec):
            return None
        runs[60].add(sec // 60)
        w = sec // window
        counts += np.bincount(w, minlength=n_windows)
        # float weights are exact here: one batch's sum stays far below 2^53.
        for total, column in ((inputs, 1), (outputs, 2)):
            weights = _ints(batch.column(column)).astype(np.float64)
            total[:] += np.bincount(w, weights=weights, minlength=n_windows).astype(np.int64)
    peak1, peak60 = runs[1].peak(), runs[60].peak()
    return [(i, int(counts[i]), int(inputs[i]), int(outputs[i]), peak1, peak60)
            for i in range(n_windows)]


def _ints(array: Any) -> Any:
    """An integer Arrow array as a numpy array, zero-copy when it holds no nulls. Not
    `to_numpy()`: pyarrow imports pandas for it, 0.3 s of a cold profile that needs no pandas."""
    import numpy as np
    import pyarrow as pa

    if array.null_count or not pa.types.is_signed_integer(array.type):
        return array.to_numpy(zero_copy_only=False)
    width = array.type.bit_width // 8
    return np.frombuffer(array.buffers()[1], dtype=np.dtype(f"<i{width}"), count=len(array),
                         offset=array.offset * width)


class _Runs:
    """The longest run of equal values across a sorted stream of integer arrays."""

    def __init__(self) -> None:
        self.best = 0
        self.last: int | None = None
        self.open = 0  # length of the run of `last` so far

    def add(self, values: Any) -> bool:
        """Take the next sorted chunk; False when the stream is not sorted."""
        import numpy as np

        if (self.last is not None and values[0] < self.last) or np.any(values[1:] < values[:-1]):
            return False
        starts = np.flatnonzero(np.diff(values)) + 1
        lengths = np.diff(np.concatenate(([0], starts, [len(values)])))
        if values[0] == self.last:
            lengths[0] += self.open
        else:
            self.best = max(self.best, self.open)
        self.best = max(self.best, int(lengths[:-1].max(initial=0)))
        self.last, self.open = int(values[-1]), int(lengths[-1])
        return True

    def peak(self) -> int:
        return max(self.best, self.open)


def _lengths(con: Any) -> tuple[LengthStats, LengthStats]:
    from profiler.analysis.quantiles import int_quantiles

    row = con.execute(_LENGTH_SQL).fetchone()
    stats = []
    for column, (mean, hi, lo) in (("input_tokens", row[:3]), ("output_tokens", row[3:])):
        q = int_quantiles(con, column, PERCENTILES)
        stats.append(LengthStats(p50=q[0, 0.5], p90=q[0, 0.9], p99=q[0, 0.99], mean=mean,
                                 max=hi, min=lo))
    return stats[0], stats[1]


def _session_share(con: Any) -> float | None:
    (share,) = con.execute(_SESSION_SQL).fetchone()
    return None if share is None else float(share)


def _prefix_reuse(
    con: Any, capacities: Sequence[int], scans: Scans
) -> tuple[float | None, dict[str, float] | None]:
    total, hits = con.execute(_REUSE_INFINITE_SQL).fetchone()
    if not total:
        return None, None
    from profiler.analysis.prefix import lru_hit_ratios

    hashes, offsets = scans.flat_hashes(con)
    ratios = lru_hit_ratios(hashes, offsets, list(capacities)) if capacities else {}
    return hits / total, {str(c): float(r) for c, r in sorted(ratios.items())}


def flat_hashes(con: Any) -> tuple[Any, Any]:
    """All block hashes in request order, flat, with per-request offsets (numpy)."""
    import numpy as np
    import pyarrow as pa

    # A fresh cursor: the relation API refuses a connection with an unfinished result.
    with con.cursor() as cur:
        table = cur.sql(
            f"SELECT coalesce(block_hashes, []::UBIGINT[]) AS h FROM {REQUESTS_TABLE} "
            "ORDER BY request_id"
        ).to_arrow_table()
    column = table.column("h").combine_chunks()
    if isinstance(column, pa.ChunkedArray):  # zero-row tables stay chunked
        column = pa.concat_arrays(column.chunks) if column.chunks else pa.array([], column.type)
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = np.asarray(column.values, dtype=np.uint64)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]
