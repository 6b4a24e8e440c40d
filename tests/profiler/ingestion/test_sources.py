"""profiler.ingestion.sources: the gzip/zstd expansion folder is removed on every exit, kill -9
included
(the next expansion removes what a killed process left)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from profiler.ingestion.sources import open_trace, remove_stale_expansions
from tests import reference as ref

ROOT = Path(__file__).resolve().parents[3]
GZ_TRACE = ref.TRACES / "mooncake_conversation_trace.jsonl.gz"
HOLD = """
import sys, time
from profiler.ingestion.sources import open_trace
with open_trace(sys.argv[1]) as opened:
    print(opened.path, flush=True)
    time.sleep(60)
"""


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """The system temp dir, private to the test (this process and its children)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _holder(temp_root: Path) -> tuple[subprocess.Popen, Path]:
    """A process in the middle of reading the gzip trace; returns it and its expansion."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp_root)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(GZ_TRACE)], env=env,
                            stdout=subprocess.PIPE, text=True)
    plain = Path(proc.stdout.readline().strip())
    assert plain.is_file() and plain.parent.parent == temp_root
    return proc, plain.parent


def test_a_kill_9_leftover_is_removed_by_the_next_expansion(temp_root):
    proc, folder = _holder(temp_root)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert folder.is_dir()  # a killed process cannot clean up after itself
    with open_trace(GZ_TRACE) as opened:
        assert not folder.exists()
        assert [p.name for p in temp_root.iterdir()] == [Path(opened.path).parent.name]
    assert list(temp_root.iterdir()) == []


def test_a_live_process_keeps_its_expansion(temp_root):
    proc, folder = _holder(temp_root)
    try:
        assert remove_stale_expansions() == []
        assert folder.is_dir()
    finally:
        proc.kill()
        proc.wait(10)
    assert remove_stale_expansions() == [str(folder)]
    assert list(temp_root.iterdir()) == []


def test_an_error_inside_removes_the_expansion(temp_root):
    with pytest.raises(RuntimeError), open_trace(GZ_TRACE):
        raise RuntimeError("reader failed")
    assert list(temp_root.iterdir()) == []


def test_a_source_name_near_the_limit_expands(temp_root, tmp_path):
    """A 250-byte file name (the file system takes 255) still expands: the expansion's own
    name is cut, not the read."""
    source = tmp_path / ("名" * 80 + ".jsonl.gz")  # 240 + 9 bytes
    source.write_bytes(GZ_TRACE.read_bytes())
    with open_trace(source) as opened:
        assert opened.compression == "gzip" and Path(opened.path).stat().st_size > 0
    assert list(temp_root.iterdir()) == []
