"""The workspace's canonical `requests` table written back out as a Parquet file.

The file is in ServeFit's canonical format (`request_id, arrival_s, input_tokens, …`), which
ingest detects with no options and reads back unchanged. It lets a trace that needed a column
map or other reading options be handed to any stage that takes a trace path.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.atomic import atomic_path
from core.errors import WorkspaceError
from profiler.schema import REQUEST_COLUMNS, REQUESTS_TABLE
from profiler.workspace import Workspace


def write_canonical(workspace: Workspace, out_path: str | os.PathLike[str]) -> Path:
    """Write the workspace's requests, in request order, to `out_path` (atomically).

    DuckDB streams the table to the file, so memory stays bounded for any trace size.

    Raises:
        WorkspaceError: no trace in the workspace, or the file cannot be written.
    """
    import duckdb

    target = Path(out_path)
    columns = ", ".join(f'"{c}"' for c in REQUEST_COLUMNS)
    try:
        with atomic_path(target) as tmp, workspace.connect(read_only=True) as con:
            # COPY takes no bound parameters: the path goes in as a string literal, quotes doubled.
            literal = "'" + str(tmp).replace("'", "''") + "'"
            con.execute(f'COPY (SELECT {columns} FROM "{REQUESTS_TABLE}" ORDER BY request_id) '  # noqa: S608
                        f"TO {literal} (FORMAT parquet)")
    except (duckdb.Error, OSError) as exc:
        raise WorkspaceError(f"cannot write {target}: {exc}") from None
    return target
