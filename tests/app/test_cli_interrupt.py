"""Ctrl-C and SIGTERM during `python -m app profile`: one line on stderr, exit 130 (128 +
SIGINT) or 143 (128 + SIGTERM), no output file, and a workspace that holds the whole trace or
none of it. DuckDB turns a Ctrl-C that stops a query into its own error (RuntimeError "Query
interrupted"); the workspace turns it back.

The first test is that mapping in this process. The others run the real command on a trace
built here: 200,000 requests of 50 prompt blocks each, so that the figures spend a few seconds
in DuckDB (the prefix-reuse query joins 10 M block hashes) before the LRU simulation. The
signals come a short while after the process opened the workspace (read from /proc). Wherever
they land, the answer is the same: where a library swallows the KeyboardInterrupt (pandas'
import was caught doing so at 1.2 s on CI's machine; numba's compiler calls back into Python
through ctypes, which drops it), the CLI remembered the signal and raises it again before it
writes (the last test makes that deterministic).
"""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
REQUESTS, BLOCKS = 200_000, 50
INTERRUPTED = "python -m app: interrupted\n"
TERMINATED = "python -m app: terminated\n"

# About 1.5 s of DuckDB work on two cores; Ctrl-C comes 0.3 s in. DuckDB looks for it between
# the tasks it runs on the calling thread, so it may stop the query at once or near its end.
LONG_QUERY = "SELECT sum(a.range * b.range) FROM range(4000000) a, range(100) b"
needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")


def test_ctrl_c_during_a_workspace_query_is_a_keyboard_interrupt(tmp_path):
    ws = Workspace(tmp_path / "fresh" / "w.duckdb")
    ctrl_c = threading.Timer(0.3, _thread.interrupt_main)  # SIGINT's path: the Python handler
    with pytest.raises(KeyboardInterrupt) as caught, ws.connect() as con:
        ctrl_c.start()
        con.execute(LONG_QUERY).fetchall()
    ctrl_c.join()
    # It stands for the error DuckDB raised (not a Ctrl-C Python delivered after the query).
    assert isinstance(caught.value.__context__, RuntimeError)
    assert not ws.path.parent.exists()  # the workspace this connection created is removed


def _write_trace(path: Path) -> None:
    rng = np.random.default_rng(0)
    hashes = rng.integers(0, REQUESTS * BLOCKS // 2, REQUESTS * BLOCKS, dtype=np.uint64)
    offsets = np.arange(0, REQUESTS * BLOCKS + 1, BLOCKS, dtype=np.int32)
    pq.write_table(pa.table({
        "arrival_s": np.cumsum(rng.exponential(0.01, REQUESTS)),
        "input_tokens": rng.integers(10, 4000, REQUESTS),
        "output_tokens": rng.integers(1, 500, REQUESTS),
        "hash_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(hashes)),
    }), path)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "trace.parquet"
    _write_trace(path)
    return path


@pytest.fixture(scope="module")
def ingested(trace, tmp_path_factory) -> Path:
    """A workspace that already holds `trace`, read with the CLI's default options: `profile`
    finds it there and goes straight to computing the figures."""
    ws = tmp_path_factory.mktemp("ws") / "w.duckdb"
    ingest(str(trace), Workspace(ws), IngestOptions())
    return ws


def _holds_open(pid: int, path: Path) -> bool:
    target = str(path.resolve())
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # the process is gone
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == target:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def _signal_while_working(trace: Path, ws: Path, out: Path, sig: int, after_s: float
                          ) -> tuple[int, str]:
    """Run `profile`, send `sig` `after_s` after it opened the workspace; (exit code, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "profile", str(trace), "--workspace", str(ws),
         "-o", str(out / "profile.json")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        while not _holds_open(proc.pid, ws):
            assert proc.poll() is None, "profile ended before it opened the workspace"
            assert time.monotonic() < deadline, "profile never opened the workspace"
            time.sleep(0.005)
    except BaseException:
        _stop(proc)
        raise
    return _signal_and_wait(proc, sig, after_s)


def _signal_and_wait(proc: subprocess.Popen, sig: int, after_s: float) -> tuple[int, str]:
    """Send `sig` to the running `proc` `after_s` from now; (its exit code, rest of stderr)."""
    try:
        time.sleep(after_s)
        assert proc.poll() is None, "the command finished before the signal: give it more work"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    return proc.returncode, err


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _requests_held(ws: Path) -> int | None:
    """Requests in the workspace's trace (checked two ways); None when there is no workspace."""
    if not ws.exists():
        assert not ws.parent.exists()  # nor the folder this run created for it
        return None
    with Workspace(ws).connect(read_only=True) as con:
        (meta,) = con.execute("SELECT n_requests FROM trace_meta").fetchone()
        (rows,) = con.execute("SELECT count(*) FROM requests").fetchone()
    assert meta == rows
    return int(rows)


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("after_s", [0.2, 0.6, 1.2])
def test_ctrl_c_while_computing_is_one_line_exit_130_and_no_output(trace, ingested, tmp_path,
                                                                   after_s):
    out = tmp_path / "out"
    out.mkdir()
    code, err = _signal_while_working(trace, ingested, out, signal.SIGINT, after_s)
    assert (code, err) == (130, INTERRUPTED)
    assert list(out.iterdir()) == []  # neither the profile nor a temporary sibling
    assert _requests_held(ingested) == REQUESTS


@pytest.mark.slow
@needs_proc
def test_sigterm_while_computing_is_one_line_exit_143_and_no_output(trace, ingested, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    code, err = _signal_while_working(trace, ingested, out, signal.SIGTERM, 0.6)
    assert (code, err) == (143, TERMINATED)
    assert list(out.iterdir()) == []


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("after_s", [0.0, 0.1])
def test_ctrl_c_while_ingesting_leaves_the_whole_trace_or_no_workspace(trace, tmp_path, after_s):
    out, ws = tmp_path / "out", tmp_path / "fresh" / "w.duckdb"
    out.mkdir()
    code, err = _signal_while_working(trace, ws, out, signal.SIGINT, after_s)
    assert (code, err) == (130, INTERRUPTED)
    assert list(out.iterdir()) == []
    assert _requests_held(ws) in (None, REQUESTS)


def test_an_interrupt_after_the_line_still_exits_130_not_by_signal():
    """The CI failure: `profile` said "interrupted" and then died of SIGINT (exit -2), a
    second KeyboardInterrupt from a signal still pending escaping `main`. `python -m app`
    turns one that escapes into the interrupt's exit code."""
    late = ("import runpy, app.cli.main\n"
            "def main(argv=None):\n"
            "    print('python -m app: interrupted', file=__import__('sys').stderr)\n"
            "    raise KeyboardInterrupt\n"
            "app.cli.main.main = main\n"
            "runpy.run_module('app', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", late], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stderr) == (130, INTERRUPTED)


# A `python -m` module that runs the real CLI with `profile`'s handler replaced by one that
# does what libraries were seen doing with a Ctrl-C that arrives inside a string `exec` (as in
# dataclasses' and numba's generated code): swallow it (pandas' import), or turn it into
# another error (numba's callbacks into SystemError); the handler then writes its file.
_LIBRARY_MAIN = """\
import runpy
import app.cli.main
from app.cli.common import write_output

def library(args):
    try:
        exec("import os, signal, time; os.kill(os.getpid(), signal.SIGINT); time.sleep(5)", {})
    except KeyboardInterrupt as exc:
        {what}
    write_output(args.output, "computed\\n")
    return 0

app.cli.main._cmd_profile = library
runpy.run_module("app", run_name="__main__")
"""


@pytest.mark.parametrize("what", [
    "pass",
    "raise SystemError('returned a result with an exception set') from exc",
])
def test_a_ctrl_c_a_library_swallowed_or_wrapped_still_exits_130_and_writes_nothing(
        what, tmp_path):
    """CI's failure at 1.2 s: the Ctrl-C landed in pandas' import, something there swallowed
    it, and `profile` wrote its file and exited 0. Once the handler remembers it, a second
    trap remains: under `python -m`, a KeyboardInterrupt that ended a string `exec` makes the
    interpreter kill itself with SIGINT at exit (-2) whatever code it exits with. And the
    error a library raises instead of it is the interrupt's, not a traceback and exit 1."""
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "__main__.py").write_text(_LIBRARY_MAIN.replace("{what}", what))
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "-m", "library", "profile", "t.csv", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert (done.returncode, done.stderr) == (130, INTERRUPTED)
    assert not out.exists()

SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"


def _signal_recommend_at(phase: str, sig: int, tmp_path: Path) -> tuple[int, str]:
    """Run `recommend --progress` on the bundled sample, with its own temp folder and an empty
    tables folder (so that it builds tables too), and send `sig` 0.3 s after it reports
    `phase`; (exit code, all of stderr)."""
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "recommend", str(SAMPLE), "--gpu", "H100-SXM",
         "--model", "meta-llama/Llama-3.1-8B-Instruct", "--progress",
         "-o", str(tmp_path / "out" / "rec.json")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path / "tmp"),
             "SERVEFIT_CACHE_DIR": str(tmp_path / "tables")})
    said: list[str] = []
    try:
        assert proc.stderr is not None
        while phase not in (said[-1] if said else ""):
            said.append(proc.stderr.readline())
            assert said[-1], f"recommend ended before {phase!r}: {''.join(said)}"
    except BaseException:
        _stop(proc)
        raise
    code, rest = _signal_and_wait(proc, sig, 0.3)
    return code, "".join(said) + rest


@pytest.mark.slow
@pytest.mark.parametrize(("phase", "sig", "code", "line"), [
    ("profiling the trace", signal.SIGINT, 130, INTERRUPTED),
    ("scheduler knobs", signal.SIGINT, 130, INTERRUPTED),
    ("finalists on the whole window", signal.SIGTERM, 143, TERMINATED),
    ("how far each engine's best holds", signal.SIGINT, 130, INTERRUPTED),
])
def test_a_signal_during_recommend_is_one_line_and_leaves_nothing(phase, sig, code, line,
                                                                  tmp_path):
    """Issue 28's `recommend` at four of its phases: the progress lines, then one line; no
    rec.json, nothing left in the temp folder (the trace's working copy, aiconfigurator's
    config folders), and no half-written table."""
    got, err = _signal_recommend_at(phase, sig, tmp_path)
    assert got == code, err
    assert err.endswith(line) and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
    assert list((tmp_path / "tmp").iterdir()) == []
    tables = tmp_path / "tables"
    assert not tables.exists() or not [p for p in tables.rglob("*") if p.name.startswith(".")]
