"""The column names of a trace file, for the app's column-mapping form.

Reads only the file's header (DuckDB DESCRIBE over the same reader ingest uses), after the same
decompression; JSON text formats report their top-level keys.
"""

from __future__ import annotations

from profiler.sources import open_trace


def trace_columns(path: str) -> list[str]:
    """Column names of `path` in file order.

    Raises:
        TraceError: the file cannot be opened or read as a table.
    """
    import duckdb

    from profiler.ingest import _columns
    from profiler.ingest_errors import map_duckdb_error

    with open_trace(path) as opened:
        con = duckdb.connect()
        try:
            return [name for name, _ in _columns(con, opened)]
        except duckdb.Error as exc:
            raise map_duckdb_error(exc, opened) from None
        finally:
            con.close()
