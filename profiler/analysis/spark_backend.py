"""The profile on Spark: the same figures as `profiler.analysis.figures`, its queries run on a
cluster.

This module owns getting the canonical `requests` rows into Spark and running
`profiler.analysis.figures.profile_figures` there; it writes no SQL of its own for any figure.
Each query is the DuckDB one, transpiled by `profiler.analysis.spark_sql`, with the same bound
parameters.

Where the rows come from:

* A URI Spark reads itself (`s3a://`, `gs://`, `hdfs://`, `file://`, or a local folder of
  Parquet parts): a table in ServeFit's canonical layout (DESIGN §2.1: `request_id` in arrival
  order, `arrival_s` in seconds; what `synth` writes), read by the executors, never the driver.
* Any other trace file: ingested on the driver by the one ingester
  (`profiler.ingestion.ingest`: format detection, validation, time rules are per-format code,
  not queries), and the canonical rows handed to Spark as Arrow.

What stays on the driver, and why: the LRU prefix-cache simulation replays requests one after
another against one cache, which no partitioning preserves (a request's hits depend on every
earlier request's blocks). Spark orders the block hashes by request and ships them as 8-byte
integers; the driver runs the same compiled kernel as the DuckDB path (`profiler.analysis.prefix`).
The infinite-cache reuse is a join and runs on Spark. The length segments fit k-means on a
sample of at most 10,000 rows on the driver and assign every row on Spark, in SQL.
"""

# ruff: noqa: S608 - the only names composed into SQL are constants (table and column names).

from __future__ import annotations

import contextlib
import decimal
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from core.errors import TraceError, UsageError
from profiler.analysis.spark_sql import to_spark
from profiler.schema import REQUEST_COLUMNS, REQUESTS_TABLE, FormatInfo, Profile

DEFAULT_MASTER = "local[*]"
# Schemes (and folders) Spark reads directly; anything else is a file for the local ingester.
DIRECT_SCHEMES = ("s3a://", "s3://", "gs://", "hdfs://", "abfs://", "abfss://", "file://")

# DuckDB column type -> Spark type, for the optional columns a canonical file may lack.
# UBIGINT has no Spark type; Parquet's UINT_64 is read as DECIMAL(20, 0), so that is the type.
_SPARK_TYPES = {"BIGINT": "bigint", "DOUBLE": "double", "INTEGER": "int", "VARCHAR": "string",
                "UBIGINT[]": "array<decimal(20,0)>", "BOOLEAN": "boolean"}
_CORE_COLUMNS = ("request_id", "arrival_s", "input_tokens", "output_tokens")

# Block hashes as signed 64-bit integers with the same bits (h - 2^64 above 2^63 - 1): Spark
# has no unsigned type, and the driver views them back as uint64, identical to DuckDB's.
_HASHES_SQL = f"""
SELECT transform(coalesce(block_hashes, array()),
                 h -> CAST(IF(h >= 9223372036854775808, h - 18446744073709551616, h) AS BIGINT))
       AS h
FROM {REQUESTS_TABLE} ORDER BY request_id
"""


def profile_trace_spark(
    path: str,
    *,
    workspace: Any,
    options: Any = None,
    lru_capacities: Sequence[int],
    seed: int = 0,
    master: str | None = None,
    spark: Any = None,
) -> Profile:
    """The profile of `path` computed on Spark (`master`, default local[*]).

    `spark`: an already started SparkSession to use (and leave running); otherwise one is
    started for this call and stopped after it.

    Raises:
        UsageError: pyspark or sqlglot is not installed, or Spark does not start.
        TraceError: the trace cannot be read, or is not a canonical table where one is needed.
    """
    from profiler.analysis.figures import profile_figures
    from profiler.analysis.scans import Scans

    with (_session(spark, master or DEFAULT_MASTER) as session, _spark_errors(path),
          _loaded(session, path, workspace, options) as (info, notes)):
        scans = Scans(rate_windows=_no_rate_scan, flat_hashes=_flat_hashes)
        return profile_figures(SparkSQL(session), info, notes,
                               lru_capacities=lru_capacities, seed=seed, scans=scans)


@contextlib.contextmanager
def _spark_errors(path: str) -> Iterator[None]:
    """Spark's and the JVM's errors (an unreachable bucket, a lost executor) as one line."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as exc:
        raise TraceError(f"Spark failed: {_first_line(exc)}", path=path) from None


class SparkSQL:
    """The slice of a DuckDB connection the profile uses, answered by Spark.

    `execute(duckdb_sql, params)` transpiles the query and binds `params` positionally.
    """

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Rows:
        rows = self.spark.sql(to_spark(sql), args=list(params) or None).collect()
        return _Rows([tuple(_plain(v) for v in row) for row in rows])


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


def _plain(value: Any) -> Any:
    """Spark's DECIMAL results as the int or float DuckDB's would be."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


# --- the session -----------------------------------------------------------------------------


@contextlib.contextmanager
def _session(spark: Any, master: str) -> Iterator[Any]:
    if spark is not None:
        yield spark
        return
    with warnings.catch_warnings():
        # pyspark 4.3 warns, once, that it predates pandas 3; no pandas object crosses here
        # (Arrow tables only), so the user is spared a warning about nothing they can change.
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas",
                                FutureWarning)
        session, owned = _start(master)
        try:
            yield session
        finally:
            if owned:
                session.stop()


def _start(master: str) -> tuple[Any, bool]:
    """(session, whether this call started it): a session already running is reused."""
    try:
        import sqlglot  # noqa: F401 - fail here, with the install hint, not mid-profile
        from pyspark.sql import SparkSession
    except ImportError as exc:
        package = (exc.name or "pyspark").split(".")[0]
        raise UsageError(f"--backend spark needs {package} (pip install -r "
                         "requirements-spark.txt; Spark also needs Java 17)") from None
    owned = SparkSession.getActiveSession() is None
    try:
        session = (SparkSession.builder.master(master).appName("servefit-profile")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    except Exception as exc:  # PySparkRuntimeError: no Java, bad master URL
        raise UsageError(f"cannot start Spark at {master}: {_first_line(exc)}") from None
    if owned:  # the user reads one profile, not Spark's INFO/WARN stream
        session.sparkContext.setLogLevel("ERROR")
    return session, owned


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- loading the canonical rows --------------------------------------------------------------


@contextlib.contextmanager
def _loaded(
    spark: Any, path: str, workspace: Any, options: Any
) -> Iterator[tuple[FormatInfo, list[str]]]:
    """`requests` registered in the session while the profile runs; its FormatInfo and notes.

    The rows are persisted (memory, then local disk) for the call: the profile scans the table
    about fifteen times, which would otherwise read the files (object storage) each time.
    """
    import os

    from pyspark import StorageLevel

    if path.startswith(DIRECT_SCHEMES) or os.path.isdir(path):
        frame = _read_canonical(spark, path)
        info = _canonical_info(path)
        notes: list[str] = []
    else:
        frame, info, notes = _ingest_locally(spark, path, workspace, options)
    frame.persist(StorageLevel.MEMORY_AND_DISK)
    frame.createOrReplaceTempView(REQUESTS_TABLE)
    try:
        yield info, notes
    finally:
        spark.catalog.dropTempView(REQUESTS_TABLE)
        frame.unpersist()


def _read_canonical(spark: Any, uri: str) -> Any:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        frame = spark.read.parquet(uri)
    except AnalysisException as exc:
        raise TraceError(f"Spark cannot read it: {_first_line(exc)}", path=uri) from None
    missing = [c for c in _CORE_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceError(
            f"not a ServeFit canonical table: no column {missing[0]!r}", path=uri,
            hint="Spark reads canonical Parquet directly; profile other formats from a file")
    columns = [F.col(c) if c in frame.columns else F.lit(None).cast(_SPARK_TYPES[t]).alias(c)
               for c, t in REQUEST_COLUMNS.items()]
    return frame.select(*columns)


def _canonical_info(uri: str) -> FormatInfo:
    from profiler.formats.canonical import FORMAT

    return FormatInfo(
        kind=FORMAT.kind, label=FORMAT.label,
        explanation="canonical request table read by Spark (Parquet)",
        columns={c: c for c in _CORE_COLUMNS[1:]}, timestamp_rule=FORMAT.time_reason or "",
        arrivals="trace", source=uri,
    )


def _ingest_locally(
    spark: Any, path: str, workspace: Any, options: Any
) -> tuple[Any, FormatInfo, list[str]]:
    """Ingest `path` with DuckDB on the driver; its `requests` rows as a Spark DataFrame."""
    from profiler.ingestion.ingest import ingest

    result = ingest(path, workspace, options)
    select = ", ".join(
        f"{c}::DECIMAL(20, 0)[] AS {c}" if t == "UBIGINT[]" else c
        for c, t in REQUEST_COLUMNS.items())
    with workspace.connect(read_only=True) as con:
        table = con.sql(f"SELECT {select} FROM {REQUESTS_TABLE} "
                        "ORDER BY request_id").to_arrow_table()
    return spark.createDataFrame(table), result.format, list(result.warnings)


# --- the two row scans -----------------------------------------------------------------------


def _no_rate_scan(con: Any, window: int, duration: float) -> None:
    """Spark aggregates the rate windows in SQL (`timing._WINDOWS_SQL`), on the executors."""
    return None


def _flat_hashes(con: Any) -> tuple[Any, Any]:
    """Every block hash in request order, flat, with per-request offsets (numpy), for the LRU
    simulation on the driver; the same uint64 values DuckDB's `flat_hashes` gives."""
    import numpy as np
    import pyarrow as pa

    column = con.spark.sql(_HASHES_SQL).toArrow().column("h").combine_chunks()
    if isinstance(column, pa.ChunkedArray):  # zero-row tables stay chunked
        column = pa.concat_arrays(column.chunks) if column.chunks else pa.array([], column.type)
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = np.asarray(column.values, dtype=np.int64).view(np.uint64)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]
