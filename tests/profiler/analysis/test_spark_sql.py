"""The transpilation layer: every shared profile query becomes Spark SQL with its parameters
intact and none of DuckDB's own syntax left; the two rewrites sqlglot cannot know about happen
exactly where they must."""

from __future__ import annotations

import re
import sys

import duckdb
import pytest

from core.errors import UsageError
from profiler.analysis import figures, quantiles, scans, segments, timing
from profiler.analysis.spark_sql import to_spark


def _assigned() -> str:
    columns, case, _ = segments._argmin_sql([(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)])
    return segments._ASSIGNED_SQL.format(columns=columns, case=case)


# Every query the profile runs through `con.execute`, as the profile composes it.
QUERIES = {
    "span": timing._SPAN_SQL,
    "gaps_cv": timing._GAPS_CV_SQL,
    "windows": timing._WINDOWS_SQL,
    "lengths": figures._LENGTH_SQL,
    "sessions": figures._SESSION_SQL,
    "reuse_infinite": figures._REUSE_INFINITE_SQL,
    "quantiles": quantiles._SQL.format(value="input_tokens", group="0", source="requests"),
    "segment_quantiles": quantiles._SQL.format(value="input_tokens", group="seg",
                                               source=_assigned()),
    "segment_count": segments._COUNT_SQL,
    "segment_sample": segments._SAMPLE_SQL,
    "segment_all": segments._ALL_SQL,
    "segment_moments": segments._MOMENTS_SQL.format(assigned=_assigned()),
}

# The module constants behind QUERIES; a new *_SQL constant must join them (or this list of
# DuckDB-only scans, which Spark's backend replaces with its own `Scans`).
COVERED = {"profiler.analysis.timing._SPAN_SQL", "profiler.analysis.timing._GAPS_CV_SQL",
           "profiler.analysis.timing._WINDOWS_SQL", "profiler.analysis.figures._LENGTH_SQL",
           "profiler.analysis.figures._SESSION_SQL",
           "profiler.analysis.figures._REUSE_INFINITE_SQL",
           "profiler.analysis.quantiles._SQL", "profiler.analysis.segments._COUNT_SQL",
           "profiler.analysis.segments._SAMPLE_SQL", "profiler.analysis.segments._ALL_SQL",
           "profiler.analysis.segments._ASSIGNED_SQL", "profiler.analysis.segments._MOMENTS_SQL"}
DUCKDB_ONLY_SCANS = {"profiler.analysis.scans._SECONDS_SQL"}

# DuckDB-only spellings that Spark's parser refuses.
DUCKDB_ONLY = [r"::", r"//", r"\bMATERIALIZED\b", r"USING SAMPLE", r"\bunnest\b", r"\brange\(",
               r"\[\]"]


@pytest.mark.parametrize("name", QUERIES)
def test_each_query_keeps_its_placeholders_and_loses_duckdb_syntax(name):
    duck = QUERIES[name]
    spark = to_spark(duck)
    assert spark.count("?") == duck.count("?")  # bound positionally on both engines
    for pattern in DUCKDB_ONLY:
        assert not re.search(pattern, spark, re.IGNORECASE), (pattern, spark)


@pytest.mark.parametrize("name", QUERIES)
def test_each_shared_query_still_runs_on_duckdb(name):
    # The portable rewrites must not cost the DuckDB path its own query: run each on a table
    # of the canonical shape and check a figure the test computes itself.
    con = duckdb.connect()
    con.execute("CREATE TABLE requests AS SELECT i::BIGINT AS request_id, i * 0.5 AS arrival_s,"
                " (i % 7 + 1)::INTEGER AS input_tokens, (i % 5 + 1)::INTEGER AS output_tokens,"
                " NULL::VARCHAR AS session_id, [i % 3, i]::UBIGINT[] AS block_hashes"
                " FROM range(40) t(i)")
    params = {"windows": [10], "quantiles": [[0.5]], "segment_quantiles": [*[2.0] * 12, [0.5]],
              "segment_moments": [2.0] * 12, "segment_sample": [[0, 1, 2]]}.get(name, [])
    rows = con.execute(QUERIES[name], params).fetchall()
    assert rows
    if name == "reuse_infinite":
        # Request i holds [i % 3, i]: 80 blocks; requests 0-2 repeat a hash only within
        # themselves, and each of requests 3..39 reuses its i % 3 block: 37 reused.
        assert rows[0] == (80, 37)
    if name == "windows":  # 40 arrivals over 20 s, 10 s windows of 20 requests each
        assert [r[1] for r in rows] == [20, 20]


def test_every_profile_query_is_covered():
    found = {f"{m.__name__}.{name}" for m in (timing, figures, scans, quantiles, segments)
             for name in vars(m) if name.endswith("_SQL")}
    assert found == COVERED | DUCKDB_ONLY_SCANS


def test_order_free_lag_window_is_ordered_by_request_id_on_spark():
    spark = to_spark(timing._GAPS_CV_SQL)
    assert re.search(r"LAG\(arrival_s\) OVER \(ORDER BY request_id", spark)


def test_order_free_aggregate_window_is_left_alone():
    spark = to_spark("SELECT sum(x) OVER () AS t, lag(x) OVER (ORDER BY y) AS l FROM t")
    assert "SUM(x) OVER ()" in spark
    assert "LAG(x) OVER (ORDER BY y" in spark and "request_id" not in spark


def test_materialized_cte_hint_is_dropped():
    spark = to_spark("WITH a AS MATERIALIZED (SELECT 1 AS x) SELECT x FROM a")
    assert spark == "WITH a AS (SELECT 1 AS x) SELECT x FROM a"


def test_missing_pyspark_is_one_clear_line(monkeypatch, tmp_path):
    from profiler.analysis.spark_backend import profile_trace_spark
    from profiler.workspace import Workspace

    monkeypatch.setitem(sys.modules, "pyspark", None)  # as on a machine without it
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(UsageError, match=r"needs pyspark \(pip install -r "
                                         r"requirements-spark.txt"):
        profile_trace_spark("trace.csv", workspace=Workspace.resolve(tmp_path / "w.duckdb"),
                            lru_capacities=[10])


def test_spark_master_without_spark_backend_is_refused(tmp_path):
    from profiler.analysis.backends import profile_with
    from profiler.workspace import Workspace

    with pytest.raises(UsageError, match="--spark-master needs --backend spark"):
        profile_with("duckdb", "trace.csv", workspace=Workspace.resolve(tmp_path / "w.duckdb"),
                     lru_capacities=[10], master="local[2]")
    assert not (tmp_path / "w.duckdb").exists()
