"""The results store on a real DuckDB file: rows land while the run goes, a run stopped or
failed half-way keeps its rows with the right status, a run left `running` by a dead process
reads as incomplete, and results round-trip exactly."""

from __future__ import annotations

import subprocess
import sys
import time

import duckdb
import pytest

from core.errors import WorkspaceError
from profiler.workspace import Workspace
from runners.benchmark.comparison import compare_runs
from runners.benchmark.store import RunMeta, RunRecorder
from runners.benchmark.stored_runs import list_runs, load_run
from runners.load.schemas import RequestResult
from runners.server.engine_metrics import MetricSample

ORIGIN = 500.0


def _result(i: int, ok: bool = True) -> RequestResult:
    sent = ORIGIN + i * 0.1
    if not ok:
        return RequestResult(success=False, error="HTTP 500", error_kind="http",
                             http_status=500, sent_at_s=sent, end_at_s=sent + 0.01)
    times = [sent + 0.05, sent + 0.07, sent + 0.095]
    return RequestResult(success=True, http_status=200, sent_at_s=sent,
                         first_token_at_s=times[0], last_token_at_s=times[-1],
                         end_at_s=sent + 0.1, chunk_times_s=times, chunk_tokens=[1, 1, 1],
                         prompt_tokens=32, output_tokens=3)


def _rows(ws: Workspace, run_id: str) -> int:
    con = duckdb.connect(str(ws.path))
    try:
        return con.execute("SELECT count(*) FROM run_requests WHERE run_id = ?",
                           [run_id]).fetchone()[0]
    finally:
        con.close()


def test_rows_land_while_the_run_goes_and_round_trip(tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    rec = RunRecorder(ws, RunMeta(run_id="r1", kind="poisson", argv=["bench"]),
                      origin_s=ORIGIN, batch_size=4, flush_interval_s=0.05)
    rec.start()
    originals = [_result(i, ok=i != 3) for i in range(10)]
    for i, r in enumerate(originals):
        rec.add_result(i, r, phase="poisson")
    rec.add_metrics([MetricSample(at_s=ORIGIN + 0.5, key="queue_depth",
                                  name="vllm:num_requests_waiting", value=3.0)])
    deadline = time.monotonic() + 5
    while rec.rows_written < 10 and time.monotonic() < deadline:
        time.sleep(0.02)
    [info] = list_runs(ws)  # the same process may read while the recorder holds its connection
    assert info.status == "running" and info.n_requests == 10
    rec.finish("complete", summary={"completed": 9})
    record = load_run(ws, "r1")
    assert record.info.status == "complete" and record.info.summary == {"completed": 9}
    assert record.info.argv == ["bench"] and record.info.finished_at is not None
    assert [s.idx for s in record.requests] == list(range(10))
    for stored, orig in zip(record.requests, originals, strict=True):
        r = stored.result
        assert stored.phase == "poisson" and r.success == orig.success
        assert r.sent_at_s == pytest.approx(orig.sent_at_s - ORIGIN, abs=1e-9)
        if orig.success:
            assert r.ttft_s == pytest.approx(orig.ttft_s, abs=1e-9)
            assert r.itl_s == pytest.approx(orig.itl_s, abs=1e-9)
            assert (r.output_tokens, r.chunk_tokens) == (3, [1, 1, 1])
        else:
            assert (r.error_kind, r.http_status) == ("http", 500)
    assert record.metrics[0].at_s == pytest.approx(0.5) and record.metrics[0].value == 3.0


def test_a_run_failing_half_way_keeps_its_rows(tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    rec = RunRecorder(ws, RunMeta(run_id="r2", kind="trace"), origin_s=ORIGIN, batch_size=2)
    rec.start()
    with pytest.raises(RuntimeError):
        try:
            for i in range(7):
                rec.add_result(i, _result(i))
            raise RuntimeError("engine died")
        except RuntimeError as exc:
            rec.finish("failed", error=str(exc))
            raise
    info = load_run(ws, "r2").info
    assert (info.status, info.error, info.n_requests) == ("failed", "engine died", 7)


def test_a_run_left_running_by_a_dead_process_reads_incomplete(tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    code = ("import sys, time\n"
            "from profiler.workspace import Workspace\n"
            "from runners.benchmark.store import RunMeta, RunRecorder\n"
            "from tests.runners.benchmark.test_store import _result\n"
            "rec = RunRecorder(Workspace.resolve(sys.argv[1]),"
            " RunMeta(run_id='r3', kind='poisson'), origin_s=500.0, batch_size=1)\n"
            "rec.start()\n"
            "for i in range(5): rec.add_result(i, _result(i))\n"
            "while rec.rows_written < 5: time.sleep(0.01)\n"
            "import os; os._exit(0)\n")  # dies without finish(): the row stays 'running'
    done = subprocess.run([sys.executable, "-c", code, str(ws.path)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    [info] = list_runs(ws)
    assert (info.run_id, info.status, info.n_requests) == ("r3", "incomplete", 5)


def test_unknown_run_and_empty_workspace(tmp_path):
    ws = Workspace(tmp_path / "none.duckdb")
    assert list_runs(ws) == []
    assert not ws.path.exists()
    rec = RunRecorder(ws, RunMeta(run_id="x", kind="poisson"), origin_s=0.0)
    rec.start()
    rec.finish("complete")
    with pytest.raises(WorkspaceError, match="no run 'nope'"):
        load_run(ws, "nope")


def test_compare_runs_summarizes_a_run_stopped_before_its_summary(tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    rec = RunRecorder(ws, RunMeta(run_id="r4", kind="burst"), origin_s=ORIGIN, batch_size=1)
    rec.start()
    for i in range(10):
        rec.add_result(i, _result(i))
    rec.finish("incomplete", analysis={"burst": {
        "baseline_ttft_p50_s": 0.05, "peak_ttft_p50_s": 0.5, "ttft_spike_ratio": 10.0,
        "baseline_queue_depth": 0.0, "peak_queue_depth": 4.0, "recovery_s": 1.5, "band": 0.25}})
    table = compare_runs(ws, ["r4"])
    [row] = table.throughput
    # 10 successes, sent 0.0 … 0.9 s after the origin, the last ends at 1.0 s.
    assert row.completed == 10 and row.request_throughput_rps == pytest.approx(10 / 1.0)
    ttft = next(r for r in table.latency if r.metric == "ttft")
    assert ttft.latency.p50 == pytest.approx(0.05)
    assert table.burst[0].recovery_s == 1.5 and table.stability == []
