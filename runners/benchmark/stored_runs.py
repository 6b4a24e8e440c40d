"""Stored runs read back from the results store (`runners.benchmark.store` owns the tables
and writes them): the run list (`list_runs`), one run with its requests and scraped metrics
(`load_run`), and a run's summary (`run_summary`). Times are run-relative seconds, as stored.
A `running` row whose process is gone reads `incomplete`.
"""

# ruff: noqa: S608 - SQL is composed only of constant column lists and a count of placeholders;
# every value is bound as a parameter.

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from pydantic import Field

from core.errors import WorkspaceError
from core.records import Record
from profiler.workspace import Workspace
from runners.benchmark.metrics import Summary, summarize
from runners.benchmark.store import RunStatus
from runners.load.schemas import RequestResult
from runners.server.engine_metrics import MetricSample


class RunInfo(Record):
    """One `runs` row. `status` reads `incomplete` for a `running` row whose process is gone."""

    run_id: str
    kind: str
    started_at: datetime
    finished_at: datetime | None
    status: RunStatus
    pid: int | None
    argv: list[str]
    config: dict[str, Any] | None
    workload: dict[str, Any]
    summary: dict[str, Any] | None
    analysis: dict[str, Any] | None
    error: str | None
    n_requests: int = Field(description="Request rows stored.")


class StoredRequest(Record):
    """One stored request: its index in the schedule, phase, and the result (run-relative)."""

    idx: int
    phase: str | None
    result: RequestResult


class RunRecord(Record):
    """A run with everything it measured."""

    info: RunInfo
    requests: list[StoredRequest]
    metrics: list[MetricSample] = Field(description="Scrapes; `at_s` is run-relative.")


_RUN_COLUMNS = ("run_id, kind, started_at, finished_at, status, pid, host, argv, config, "
                "workload, summary, analysis, error, "
                "(SELECT count(*) FROM run_requests q WHERE q.run_id = runs.run_id)")


def list_runs(workspace: Workspace) -> list[RunInfo]:
    """Every stored run, newest first ([] when the workspace has none)."""
    if not workspace.exists():
        return []
    with _connect_existing(workspace) as con:
        if not _has_runs(con):
            return []
        rows = con.execute(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC").fetchall()
    return [_info(row) for row in rows]


def load_run(workspace: Workspace, run_id: str) -> RunRecord:
    """One run with its requests (by index) and scraped metrics (by time).

    Raises:
        WorkspaceError: no such run.
    """
    with _connect_existing(workspace) as con:
        row = (con.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?",
                           [run_id]).fetchone() if _has_runs(con) else None)
        if row is None:
            raise WorkspaceError(f"no run {run_id!r} in {workspace.path}: see the run list")
        reqs = con.execute("SELECT * EXCLUDE (run_id) FROM run_requests WHERE run_id = ? "
                           "ORDER BY idx", [run_id]).fetchall()
        mets = con.execute("SELECT t_s, key, name, value FROM run_metrics WHERE run_id = ? "
                           "ORDER BY t_s, key", [run_id]).fetchall()
    return RunRecord(
        info=_info(row), requests=[_stored(r) for r in reqs],
        metrics=[MetricSample(at_s=t, key=k, name=n, value=v) for t, k, n, v in mets])


def _connect_existing(workspace: Workspace) -> Any:
    """Open for reading without the read-only flag: DuckDB refuses a read-only connection in a
    process that already holds a read-write one (a run being recorded)."""
    if not workspace.exists():
        raise WorkspaceError(f"no workspace at {workspace.path}: run a benchmark first")
    return workspace.connect()


def _has_runs(con: Any) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_name = 'runs'").fetchone()[0])


def _info(row: tuple[Any, ...]) -> RunInfo:
    (run_id, kind, started, finished, status, pid, host, argv, config, workload, summary,
     analysis, error, n) = row
    if status == "running" and host == os.uname().nodename and not _alive(pid):
        status = "incomplete"  # its process is gone: it will never finish
    return RunInfo(run_id=run_id, kind=kind, started_at=started, finished_at=finished,
                   status=status, pid=pid, argv=json.loads(argv or "[]"),
                   config=_load(config), workload=_load(workload) or {},
                   summary=_load(summary), analysis=_load(analysis), error=error,
                   n_requests=int(n))


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stored(row: tuple[Any, ...]) -> StoredRequest:
    (idx, phase, success, kind, error, status, sent, first, last, end, _ttft, _tpot, _e2e,
     prompt, output, chunks, chunk_tokens) = row
    return StoredRequest(idx=idx, phase=phase, result=RequestResult(
        success=success, error=error, error_kind=kind, http_status=status, sent_at_s=sent,
        first_token_at_s=first, last_token_at_s=last, end_at_s=end,
        chunk_times_s=list(chunks or []), chunk_tokens=chunk_tokens, prompt_tokens=prompt,
        output_tokens=output))


def run_summary(record: RunRecord) -> Summary:
    """The run's `Summary`: the one stored when it finished (runs stored before `band`
    existed load too: it defaults to None), else computed from its stored rows (a run stopped
    before its summary was written)."""
    if record.info.summary is not None:
        return Summary.model_validate(record.info.summary)
    results = [r.result for r in record.requests]
    return summarize(results, started_at_s=0.0 if results else None)
