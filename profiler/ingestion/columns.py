"""How DuckDB reads a trace file as a table: its scan function and its (typed) column names.

Ingest stages rows through `scan_sql`, and the app's column-mapping form lists `trace_columns`,
so both see the file through the same reader, after the same decompression; JSON text formats
report their top-level keys.
"""

# ruff: noqa: S608 - SQL here is composed only of constant table-function text; the file's path
# is a bound parameter.

from __future__ import annotations

from typing import Any

from core.errors import TraceError
from profiler.ingestion.sources import OpenedTrace, open_trace


def scan_sql(opened: OpenedTrace) -> str:
    """The DuckDB table function reading the file (its path is the one `?` parameter)."""
    return {
        "parquet": "read_parquet(?)",
        "csv": "read_csv(?, header = true)",
        "jsonl": "read_json(?, format = 'newline_delimited')",
        "json_array": "read_json(?, format = 'array')",
    }[opened.container]


def typed_columns(con: Any, opened: OpenedTrace) -> list[tuple[str, str]]:
    """(name, DuckDB type) of each column of the opened file, in file order.

    Raises:
        TraceError: the file has no columns.
    """
    rows = con.execute(f"DESCRIBE SELECT * FROM {scan_sql(opened)}", [opened.path]).fetchall()
    if not rows:
        raise TraceError("no columns", path=opened.source)
    return [(r[0], r[1]) for r in rows]


def trace_columns(path: str) -> list[str]:
    """Column names of `path` in file order.

    Raises:
        TraceError: the file cannot be opened or read as a table.
    """
    import duckdb

    from profiler.ingestion.diagnose import map_duckdb_error

    with open_trace(path) as opened:
        con = duckdb.connect()
        try:
            return [name for name, _ in typed_columns(con, opened)]
        except duckdb.Error as exc:
            raise map_duckdb_error(exc, opened) from None
        finally:
            con.close()
