"""Every figure of DESIGN §2.2 of the `requests` table, on any connection that answers DuckDB
SQL: the request count, the arrival timing (`profiler.analysis.timing`), the length statistics,
the multi-turn share and the prefix reuse, gathered into one `Profile`.

All figures are DuckDB SQL with bound parameters, except the two that need a sequential pass or
a model: the LRU prefix-cache simulation (`profiler.analysis.prefix`, compiled) and the length
segments (`profiler.analysis.segments`, numpy k-means on a seeded sample, assigned to every row
in SQL).

The same queries run on Spark (`profiler.analysis.spark_backend`, `profile --backend spark`),
transpiled by `profiler.analysis.spark_sql`; `tests/profiler/analysis/test_spark_sql.py` checks
each still transpiles.
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiler.analysis.scans import Scans
from profiler.analysis.timing import timing_figures
from profiler.schema import REQUESTS_TABLE, FormatInfo, LengthStats, Profile

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
    timing, rate_series = timing_figures(con, warnings, scans)
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
