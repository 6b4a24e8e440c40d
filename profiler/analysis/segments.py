"""Length segments: clusters of requests in (ln(1 + input), ln(1 + output)) space.

k-means (`profiler.analysis.kmeans`, numpy, seeded) is fitted on a seeded sample of at most
`SAMPLE_ROWS` rows; k in 1..`MAX_K` is chosen by the silhouette score on a subset of
`SILHOUETTE_ROWS` (k = 1 when no split scores at least `MIN_SILHOUETTE`). Every row of the
trace is then assigned to its nearest centroid in SQL, so shares, medians and the per-segment
log moments are exact over the whole trace.
"""

# ruff: noqa: S608 - composed from constants and a count of placeholders; values are bound.

from __future__ import annotations

from typing import Any

from profiler.analysis.quantiles import int_quantiles
from profiler.schema import REQUESTS_TABLE, Segment

SAMPLE_ROWS = 10_000
SILHOUETTE_ROWS = 2_000
MAX_K = 4
MIN_SILHOUETTE = 0.35
MIN_ROWS_TO_SPLIT = 50

# The sample is the rows whose request_id numpy draws (seeded) from 0..n-1, in request order, so
# DuckDB and Spark (`profiler.analysis.spark_sql`) fit k-means on the very same points; a SQL
# sampling
# clause (DuckDB's reservoir, Spark's TABLESAMPLE) would give each engine a different sample.
_COUNT_SQL = f"SELECT count(*) FROM {REQUESTS_TABLE}"
_SAMPLE_SQL = f"""
SELECT ln(1 + input_tokens), ln(1 + output_tokens) FROM {REQUESTS_TABLE}
WHERE request_id IN (SELECT unnest(CAST(? AS BIGINT[]))) ORDER BY request_id
"""
_ALL_SQL = f"""
SELECT ln(1 + input_tokens), ln(1 + output_tokens) FROM {REQUESTS_TABLE} ORDER BY request_id
"""

# Each row with its nearest centroid (`seg`); {columns}/{case} come from _argmin_sql.
_ASSIGNED_SQL = f"""(
    SELECT input_tokens, output_tokens, li, lo, {{case}} AS seg FROM (
        SELECT *, {{columns}} FROM (
            SELECT input_tokens, output_tokens, ln(1 + input_tokens) AS li,
                   ln(1 + output_tokens) AS lo
            FROM {REQUESTS_TABLE})))"""

_MOMENTS_SQL = """
SELECT seg, count(*), avg(li), avg(lo), var_pop(li), covar_pop(li, lo), var_pop(lo)
FROM {assigned} GROUP BY seg ORDER BY seg
"""


def find_segments(con: Any, *, seed: int = 0) -> list[Segment]:
    """Segments of the workspace's `requests`, ordered by median input length."""
    import numpy as np

    sample = np.asarray(_sample(con, seed), float).reshape(-1, 2)
    if len(sample) == 0:
        return []
    centroids = _centroids(sample, seed)
    columns, case, params = _argmin_sql(centroids)
    assigned = _ASSIGNED_SQL.format(columns=columns, case=case)
    rows = con.execute(_MOMENTS_SQL.format(assigned=assigned), params).fetchall()
    medians = {
        column: int_quantiles(con, column, [0.5], group_sql="seg", source_sql=assigned,
                              source_params=params)
        for column in ("input_tokens", "output_tokens")
    }
    total = sum(r[1] for r in rows)
    return [
        Segment(
            share=r[1] / total,
            n_requests=int(r[1]),
            input_tokens_p50=medians["input_tokens"][r[0], 0.5],
            output_tokens_p50=medians["output_tokens"][r[0], 0.5],
            log_input_mean=float(r[2]),
            log_output_mean=float(r[3]),
            log_cov=[[float(r[4]), float(r[5])], [float(r[5]), float(r[6])]],
        )
        for r in rows
    ]


def _sample(con: Any, seed: int) -> list[tuple[float, float]]:
    """(ln(1 + input), ln(1 + output)) of at most SAMPLE_ROWS rows, drawn with `seed`."""
    import numpy as np

    (n,) = con.execute(_COUNT_SQL).fetchone()
    if n <= SAMPLE_ROWS:
        return list(con.execute(_ALL_SQL).fetchall())
    ids = np.random.default_rng(seed).choice(int(n), size=SAMPLE_ROWS, replace=False)
    return list(con.execute(_SAMPLE_SQL, [sorted(int(i) for i in ids)]).fetchall())


def _argmin_sql(centroids: list[tuple[float, float]]) -> tuple[str, str, list[float]]:
    """Distance columns d0..dk-1 and a CASE giving the nearest centroid (first on ties).

    Segment i wins when d_i is no larger than every later distance, earlier ones having lost.
    Centroid coordinates are bound parameters.
    """
    k = len(centroids)
    columns = ", ".join(f"(li - ?) * (li - ?) + (lo - ?) * (lo - ?) AS d{i}" for i in range(k))
    params = [v for cx, cy in centroids for v in (cx, cx, cy, cy)]
    whens = [f"WHEN d{i} <= {_least([f'd{j}' for j in range(i + 1, k)])} THEN {i}"
             for i in range(k - 1)]
    case = f"CASE {' '.join(whens)} ELSE {k - 1} END" if whens else "0"
    return columns, case, params


def _least(terms: list[str]) -> str:
    # Spark's least() wants two arguments or more; DuckDB's takes one.
    return terms[0] if len(terms) == 1 else f"least({', '.join(terms)})"


def _centroids(sample: Any, seed: int) -> list[tuple[float, float]]:
    """Centroids sorted by input then output; one centroid when no split is convincing."""
    import numpy as np

    mean = sample.mean(axis=0)
    best: tuple[float, Any] = (MIN_SILHOUETTE, mean[None, :])
    distinct = len(np.unique(sample, axis=0))
    if len(sample) >= MIN_ROWS_TO_SPLIT and distinct > MAX_K:
        from profiler.analysis.kmeans import kmeans, silhouettes

        fits = [kmeans(sample, k, seed=seed, n_init=3) for k in range(2, MAX_K + 1)]
        scores = silhouettes(sample, [labels for _, labels, _ in fits], seed=seed,
                             sample_size=min(SILHOUETTE_ROWS, len(sample)))
        for (centres, _, _), score in zip(fits, scores, strict=True):
            # None: the scored subset holds one cluster only, no evidence of that k
            if score is not None and score > best[0]:
                best = (score, centres)
    centers = sorted((float(x), float(y)) for x, y in best[1])
    return centers
