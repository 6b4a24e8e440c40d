"""The results store: benchmark runs, their requests and scraped metrics in the DuckDB
workspace, written as they arrive so a run killed half-way keeps what it measured.

Tables: `runs` (one row per run; status running → complete | incomplete | failed),
`run_requests` (one row per finished request), `run_metrics` (scraped samples). Times in
`run_requests`/`run_metrics` are seconds since the run's origin (a `perf_counter` reading taken
when the run began), so requests and scrapes share one axis. SQL is parameterized throughout.
This module owns the tables and writes them (`RunRecorder`); reading runs back is
`runners.benchmark.stored_runs`, comparing them `runners.benchmark.comparison`.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field

from core.errors import WorkspaceError
from core.records import Record
from profiler.workspace import Workspace
from runners.load.schemas import RequestResult
from runners.server.engine_metrics import MetricSample

RunStatus = Literal["running", "complete", "incomplete", "failed"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY, kind VARCHAR, started_at TIMESTAMP, finished_at TIMESTAMP,
        status VARCHAR, pid INTEGER, host VARCHAR, argv VARCHAR, config VARCHAR,
        workload VARCHAR, summary VARCHAR, analysis VARCHAR, error VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS run_requests (
        run_id VARCHAR, idx INTEGER, phase VARCHAR, success BOOLEAN, error_kind VARCHAR,
        error VARCHAR, http_status INTEGER, sent_s DOUBLE, first_token_s DOUBLE,
        last_token_s DOUBLE, end_s DOUBLE, ttft_s DOUBLE, tpot_s DOUBLE, e2e_s DOUBLE,
        prompt_tokens INTEGER, output_tokens INTEGER, chunk_times_s DOUBLE[],
        chunk_tokens INTEGER[])""",
    """CREATE TABLE IF NOT EXISTS run_metrics (
        run_id VARCHAR, t_s DOUBLE, key VARCHAR, name VARCHAR, value DOUBLE)""",
)
_STOP = object()


class RunMeta(Record):
    """What a run was asked to do (stored when it starts)."""

    run_id: str
    kind: str = Field(description="Workload kind (trace, poisson, sweep, burst, …).")
    argv: list[str] = Field(default_factory=list, description="Command line, when from the CLI.")
    config: dict[str, Any] | None = Field(None, description="EngineConfig / endpoint, as JSON.")
    workload: dict[str, Any] = Field(default_factory=dict, description="Workload spec as JSON.")


def ensure_schema(workspace: Workspace) -> None:
    """Create the run tables if they are missing."""
    with workspace.connect() as con:
        for statement in _SCHEMA:
            con.execute(statement)


class RunRecorder:
    """Writes one run: the `runs` row at `start`, request and metric rows in batches from a
    writer thread, the final status at `finish`. Safe to call `add_*` from any thread.

    The load generator's event loop only puts `(idx, phase, result)` on a queue; the writer
    builds the rows, column by column into one Arrow table a batch, and inserts it in one
    statement. Row-at-a-time `executemany` cost ~1 ms a request under the GIL, which at
    thousands of requests a second starved the loop that reads the sockets (issue 13).
    A batch goes to disk every `flush_interval_s` (or `batch_size` rows), so a run killed
    half-way keeps all but its last fraction of a second.
    """

    def __init__(self, workspace: Workspace, meta: RunMeta, *, origin_s: float,
                 batch_size: int = 4096, flush_interval_s: float = 0.25) -> None:
        self.workspace, self.meta, self.origin_s = workspace, meta, origin_s
        self.batch_size, self.flush_interval_s = batch_size, flush_interval_s
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.rows_written = 0

    @property
    def run_id(self) -> str:
        return self.meta.run_id

    def start(self) -> None:
        """Insert the `running` row and start the writer thread."""
        ensure_schema(self.workspace)
        with self.workspace.connect() as con:
            con.execute(
                "INSERT INTO runs (run_id, kind, started_at, status, pid, host, argv, config, "
                "workload) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                [self.run_id, self.meta.kind, _now(), os.getpid(), os.uname().nodename,
                 json.dumps(self.meta.argv), _json(self.meta.config),
                 json.dumps(self.meta.workload)])
        self._thread = threading.Thread(target=self._write_loop, name=f"store-{self.run_id}",
                                        daemon=True)
        self._thread.start()

    def add_result(self, idx: int, result: RequestResult, phase: str | None = None) -> None:
        self._queue.put((idx, phase, result))

    def add_metrics(self, samples: list[MetricSample]) -> None:
        self._queue.put(samples)

    def finish(self, status: RunStatus, *, summary: dict[str, Any] | None = None,
               analysis: dict[str, Any] | None = None, error: str | None = None) -> None:
        """Flush what is queued, stop the writer, and record the final status.

        Raises:
            WorkspaceError: the writer thread failed (rows up to its failure are stored).
        """
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        if self._error is not None and status == "complete":
            status, error = "incomplete", f"store writer failed: {self._error}"
        with self.workspace.connect() as con:
            con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary = ?, analysis = ?, "
                "error = ? WHERE run_id = ?",
                [status, _now(), _json(summary), _json(analysis), error, self.run_id])
        if self._error is not None:
            raise WorkspaceError(f"run {self.run_id}: storing results failed: {self._error}")

    def _write_loop(self) -> None:
        try:
            with self.workspace.connect() as con:
                self._drain(con)
        except BaseException as exc:  # kept for finish(); rows so far are committed
            self._error = exc
            while self._queue.get() is not _STOP:
                pass

    def _drain(self, con: Any) -> None:
        reqs: list[tuple[int, str | None, RequestResult]] = []
        mets: list[MetricSample] = []
        deadline = time.monotonic() + self.flush_interval_s
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                item = None
            if item is _STOP:
                self._flush(con, reqs, mets)
                return
            if isinstance(item, list):
                mets.extend(item)
            elif item is not None:
                reqs.append(item)
            if len(reqs) >= self.batch_size or time.monotonic() >= deadline:
                self._flush(con, reqs, mets)
                deadline = time.monotonic() + self.flush_interval_s

    def _flush(self, con: Any, reqs: list[tuple[int, str | None, RequestResult]],
               mets: list[MetricSample]) -> None:
        if not reqs and not mets:
            return
        con.execute("BEGIN")
        if reqs:
            con.register("request_batch", _request_table(self.run_id, reqs, self.origin_s))
            con.execute("INSERT INTO run_requests SELECT * FROM request_batch")
            con.unregister("request_batch")
        if mets:
            con.executemany("INSERT INTO run_metrics VALUES (?, ?, ?, ?, ?)",
                            [(self.run_id, s.at_s - self.origin_s, s.key, s.name, s.value)
                             for s in mets])
        con.execute("COMMIT")
        self.rows_written += len(reqs)
        reqs.clear()
        mets.clear()


def _request_table(run_id: str, reqs: list[tuple[int, str | None, RequestResult]],
                   origin: float) -> Any:
    """One Arrow table of `run_requests` rows (columns in the table's order), times made
    run-relative. Chunk times go in as one flat array with offsets, not a list per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rs = [r for _, _, r in reqs]
    offsets = [0]
    flat: list[float] = []
    for r in rs:
        flat.extend(r.chunk_times_s)
        offsets.append(len(flat))
    chunks = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                      pc.subtract(pa.array(flat, pa.float64()), origin))

    def rel(values: list[float | None]) -> Any:
        return pc.subtract(pa.array(values, pa.float64()), origin)

    return pa.table({
        "run_id": pa.array([run_id] * len(rs), pa.string()),
        "idx": pa.array([i for i, _, _ in reqs], pa.int32()),
        "phase": pa.array([p for _, p, _ in reqs], pa.string()),
        "success": pa.array([r.success for r in rs], pa.bool_()),
        "error_kind": pa.array([r.error_kind for r in rs], pa.string()),
        "error": pa.array([r.error for r in rs], pa.string()),
        "http_status": pa.array([r.http_status for r in rs], pa.int32()),
        "sent_s": rel([r.sent_at_s for r in rs]),
        "first_token_s": rel([r.first_token_at_s for r in rs]),
        "last_token_s": rel([r.last_token_at_s for r in rs]),
        "end_s": rel([r.end_at_s for r in rs]),
        "ttft_s": pa.array([r.ttft_s for r in rs], pa.float64()),
        "tpot_s": pa.array([r.tpot_s for r in rs], pa.float64()),
        "e2e_s": pa.array([r.e2e_s for r in rs], pa.float64()),
        "prompt_tokens": pa.array([r.prompt_tokens for r in rs], pa.int32()),
        "output_tokens": pa.array([r.output_tokens for r in rs], pa.int32()),
        "chunk_times_s": chunks,
        "chunk_tokens": pa.array([r.chunk_tokens for r in rs], pa.list_(pa.int32())),
    })


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)
