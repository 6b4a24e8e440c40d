"""The results store: benchmark runs, their requests and scraped metrics in the DuckDB
workspace, written as they arrive so a run killed half-way keeps what it measured.

Tables: `runs` (one row per run; status running → complete | incomplete | failed),
`run_requests` (one row per finished request), `run_metrics` (scraped samples). Times in
`run_requests`/`run_metrics` are seconds since the run's origin (a `perf_counter` reading taken
when the run began), so requests and scrapes share one axis. SQL is parameterized throughout.
"""

# ruff: noqa: S608 - SQL is composed only of constant column lists and a count of placeholders;
# every value is bound as a parameter.

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
from core.figures import Latency
from core.records import Record
from profiler.workspace import Workspace
from runners.benchmark.metrics import Summary, summarize
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


# -- reading -----------------------------------------------------------------------------------

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


# -- comparison --------------------------------------------------------------------------------


class ThroughputRow(Record):

    run_id: str
    kind: str
    status: RunStatus
    completed: int
    error_rate: float
    request_throughput_rps: float
    output_throughput_tok_s: float
    goodput_rps: float


class LatencyRow(Record):

    run_id: str
    metric: Literal["ttft", "tpot", "itl", "e2e"]
    latency: Latency


class BurstRow(Record):

    run_id: str
    baseline_ttft_p50_s: float | None
    peak_ttft_p50_s: float | None
    ttft_spike_ratio: float | None
    peak_queue_depth: float | None
    recovery_s: float | None


class StabilityRow(Record):

    run_id: str
    ttft_p50_ratio: float | None
    ttft_p95_ratio: float | None
    throughput_ratio: float | None
    ttft_p50_slope_s_per_s: float | None


class Comparison(Record):
    """Runs side by side: steady throughput, latency distributions, burst spike/recovery (burst
    runs only) and long-run stability (soak runs only)."""

    throughput: list[ThroughputRow]
    latency: list[LatencyRow]
    burst: list[BurstRow]
    stability: list[StabilityRow]


def compare_runs(workspace: Workspace, run_ids: list[str]) -> Comparison:
    """The comparison tables for `run_ids`, from each run's stored summary and analysis.

    A run stopped before its summary was written is summarized from its stored rows.

    Raises:
        WorkspaceError: an unknown run id.
    """
    out = Comparison(throughput=[], latency=[], burst=[], stability=[])
    for run_id in run_ids:
        record = load_run(workspace, run_id)
        info = record.info
        summary = run_summary(record)
        out.throughput.append(ThroughputRow(
            run_id=run_id, kind=info.kind, status=info.status, completed=summary.completed,
            error_rate=summary.error_rate,
            request_throughput_rps=summary.request_throughput_rps,
            output_throughput_tok_s=summary.output_throughput_tok_s,
            goodput_rps=summary.goodput_rps))
        for metric in ("ttft", "tpot", "itl", "e2e"):
            d = getattr(summary, f"{metric}_s")
            out.latency.append(LatencyRow(run_id=run_id, metric=metric, latency=d))
        analysis = info.analysis or {}
        if "burst" in analysis:
            b = analysis["burst"]
            out.burst.append(BurstRow(run_id=run_id, **{k: b[k] for k in BurstRow.model_fields
                                                         if k != "run_id"}))
        if "soak" in analysis:
            s = analysis["soak"]
            out.stability.append(StabilityRow(
                run_id=run_id, **{k: s[k] for k in StabilityRow.model_fields if k != "run_id"}))
    return out


def run_summary(record: RunRecord) -> Summary:
    """The run's `Summary`: the one stored when it finished (runs stored before `band`
    existed load too: it defaults to None), else computed from its stored rows (a run stopped
    before its summary was written)."""
    if record.info.summary is not None:
        return Summary.model_validate(record.info.summary)
    results = [r.result for r in record.requests]
    return summarize(results, started_at_s=0.0 if results else None)
