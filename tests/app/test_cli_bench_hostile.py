"""`python -m app bench` against hostile servers and killed runs (issue 16, F1–F4), each
reproduced with a tiny local server (tests/runners/hostile.py) or a real kill.

F1: a server that accepts and never answers, without --model, once hung for good; now the
model discovery is bounded by --timeout-s. F2: non-HTTP bytes were a traceback. F3: every
request failing was stored `complete` with exit 0; file:// was not refused. F4: SIGTERM or
kill -9 of `bench --workers 2` left the workers loading the server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.workspace import Workspace
from runners.benchmark.stored_runs import list_runs, load_run
from tests.runners.fake_openai import FakeOpenAI
from tests.runners.hostile import HostileServer

ROOT = Path(__file__).resolve().parents[2]
LOAD = ("--workload", "concurrency", "--concurrency", "3", "--num-requests", "3",
        "--prompt-tokens", "8", "--output-tokens", "2")
GONE_WITHIN_S = 10.0  # bound on the wait for a killed run's processes to be gone


@pytest.fixture
def hostile(request):
    server = HostileServer(request.param).start()
    yield server
    server.stop()


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("hostile", ["silent"], indirect=True)
def test_f1_a_server_that_never_answers_fails_within_the_timeout(hostile, tmp_path):
    ws = tmp_path / "w.duckdb"
    out = subprocess.run(  # a process of its own: it used to hang for good
        [sys.executable, "-m", "app", "bench", "--endpoint", hostile.url, *LOAD,
         "--timeout-s", "1", "--workspace", str(ws)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120, check=False)
    assert out.returncode == 2
    # the 1 s request timeout ended it (the message names it), not the 600 s default
    assert "did not answer within 1 s" in _one_line(out.stderr)
    [info] = list_runs(Workspace(ws))
    assert info.status == "failed" and "did not answer" in (info.error or "")


@pytest.mark.parametrize("hostile", ["not_http"], indirect=True)
def test_f2_non_http_bytes_are_a_failed_run_not_a_traceback(cli, hostile, tmp_path):
    ws = tmp_path / "w.duckdb"
    out = cli("bench", "--endpoint", hostile.url, *LOAD, "--model", "m", "--vocab-size", "5000",
              "--timeout-s", "2", "--workspace", str(ws), "--json", cwd=tmp_path)
    assert out.returncode == 1
    assert "failed: no request succeeded: 3 of 3 failed" in _one_line(out.stderr)
    got = json.loads(out.stdout)
    assert got["status"] == "failed" and got["completed"] == 0
    [info] = list_runs(Workspace(ws))
    assert info.status == "failed" and info.error == got["error"]


@pytest.mark.parametrize("hostile", ["not_http"], indirect=True)
def test_f2_non_http_bytes_while_discovering_the_model_are_one_line(cli, hostile, tmp_path):
    out = cli("bench", "--endpoint", hostile.url, *LOAD, "--timeout-s", "2",
              "--workspace", str(tmp_path / "w.duckdb"), cwd=tmp_path)
    assert out.returncode == 2
    assert f"cannot reach {hostile.url}" in _one_line(out.stderr)


@pytest.mark.parametrize(("hostile", "kind"), [
    ("endless", "timeout"), ("cut", "connection"), ("garbage_sse", "malformed")],
    indirect=["hostile"])
def test_f3_every_request_failing_is_a_failed_run_with_its_reason(cli, hostile, kind, tmp_path):
    ws = tmp_path / "w.duckdb"
    out = cli("bench", "--endpoint", hostile.url, *LOAD, "--model", "m", "--vocab-size", "5000",
              "--timeout-s", "1", "--workspace", str(ws), "--json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    got = json.loads(out.stdout)
    assert got["status"] == "failed" and got["completed"] == 0 and got["errors"] == {kind: 3}
    assert got["error"].startswith(f"no request succeeded: 3 of 3 failed; most often {kind} (3)")
    assert got["error"] in _one_line(out.stderr)
    assert hostile.posts == 3
    record = load_run(Workspace(ws), got["run_id"])
    assert record.info.status == "failed" and record.info.error == got["error"]
    assert [r.result.error_kind for r in record.requests] == [kind] * 3


@pytest.mark.parametrize("hostile", ["garbage_sse"], indirect=True)
def test_f3_the_text_report_says_why_the_run_failed(cli, hostile, tmp_path):
    out = cli("bench", "--endpoint", hostile.url, *LOAD, "--model", "m", "--vocab-size", "5000",
              "--workspace", str(tmp_path / "w.duckdb"), cwd=tmp_path)
    assert out.returncode == 1
    assert "(failed) against" in out.stdout
    assert "failed     no request succeeded" in out.stdout


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "127.0.0.1:8000",
                                 "http://"])
def test_f3_only_http_urls_are_accepted_before_anything_is_written(cli, url, tmp_path):
    ws = tmp_path / "w.duckdb"
    out = cli("bench", "--endpoint", url, *LOAD, "--workspace", str(ws), cwd=tmp_path)
    assert out.returncode == 2
    line = _one_line(out.stderr)
    assert line.startswith("python -m app: error: --endpoint:") and repr(url) in line
    assert not ws.exists()


# -- F4: a killed run takes its load workers with it -------------------------------------------


def _children(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (read from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                out.add(int(entry.name))
    return out


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (state, ppid, …); None when the pid is gone."""
    try:
        text = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")  # a zombie has ended


@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI(ttft_s=0.02, tpot_s=0.01).start()
    yield server
    server.stop()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_f4_killing_bench_with_two_workers_leaves_no_process(fake, sig, tmp_path):
    ws = tmp_path / "w.duckdb"
    before = len(fake.bodies)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "bench", "--endpoint", fake.url, "--workload", "poisson",
         "--rate", "40", "--num-requests", "4000", "--prompt-tokens", "16", "--output-tokens",
         "5", "--workers", "2", "--vocab-size", "5000", "--workspace", str(ws)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        # Both workers are sending, and the first requests (0.07 s each) are done and stored.
        while len(fake.bodies) < before + 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        spawned = _children(proc.pid)  # the two workers and multiprocessing's resource tracker
        assert len(spawned) >= 2
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while any(_alive(p) for p in spawned) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in spawned if _alive(p)], "processes outlived the killed bench"
    finally:
        proc.kill()
    sent = len(fake.bodies)
    time.sleep(0.5)
    assert len(fake.bodies) == sent  # nothing loads the server any more
    [info] = list_runs(Workspace(ws))
    assert info.status == "incomplete"  # stored so on SIGTERM; read so once the pid is gone
    if sig == signal.SIGTERM:
        assert proc.returncode == 143
        assert err.strip().splitlines()[-1] == "python -m app: terminated (run stored as " \
            "incomplete)"
        assert "Traceback" not in err
        assert info.error == "interrupted"
        assert info.n_requests == sent - before  # each request sent: done, or cancelled
