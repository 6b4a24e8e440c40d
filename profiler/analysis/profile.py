"""The load profile of a workspace's trace: ingest a trace and profile it (`profile_trace`),
profile the trace already ingested (`compute_profile`), or read a saved profile.json back
(`load_profile_or_trace`).

The figures themselves are `profiler.analysis.figures`, run here on the workspace's DuckDB
connection with DuckDB's own streaming scans (`profiler.analysis.scans`); Spark runs the same
figures through `profiler.analysis.spark_backend`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import UsageError, WorkspaceError
from profiler.analysis.figures import profile_figures
from profiler.analysis.scans import Scans, flat_hashes, rate_windows
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.schema import FormatInfo, Profile
from profiler.workspace import Workspace

DEFAULT_LRU_CAPACITIES: tuple[int, ...] = (1_000, 10_000, 100_000)
PROFILE_SNIFF_BYTES = 4096


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


def _profile(
    con: Any, info: FormatInfo, warnings: list[str], capacities: Sequence[int], seed: int
) -> Profile:
    return profile_figures(con, info, warnings, lru_capacities=capacities, seed=seed,
                           scans=Scans(rate_windows, flat_hashes))
