"""Workspace: location, memory cap, no litter when opening fails, and threads of one process
sharing a file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from core.errors import WorkspaceError
from profiler.workspace import Workspace


def test_memory_limit_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEFIT_MEMORY_LIMIT", "512MiB")
    ws = Workspace.resolve(tmp_path / "w.duckdb")
    with ws.connect() as con:
        (value,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert value.replace(" ", "") in {"512.0MiB", "536.8MB", "512MiB"}


def test_bad_memory_limit_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEFIT_MEMORY_LIMIT", "1GB'; DROP TABLE requests; --")
    ws = Workspace.resolve(tmp_path / "sub" / "w.duckdb")
    with pytest.raises(WorkspaceError, match="SERVEFIT_MEMORY_LIMIT"), ws.connect():
        pass
    assert not (tmp_path / "sub").exists()


def test_read_only_needs_an_existing_workspace(tmp_path):
    with pytest.raises(WorkspaceError, match="run `profile`"), \
            Workspace.resolve(tmp_path / "none.duckdb").connect(read_only=True):
        pass


def test_a_reader_waits_for_a_writer_of_another_thread(tmp_path):
    """Issue 16 F6: in one process DuckDB refuses a read-only connection to a file another
    thread holds read-write ("different configuration"); the second now waits its turn."""
    ws = Workspace.resolve(tmp_path / "w.duckdb")
    opened, release = threading.Event(), threading.Event()

    def writer() -> None:
        with ws.connect() as con:
            con.execute("CREATE TABLE t AS SELECT 42 AS x")
            opened.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    assert opened.wait(10)
    threading.Timer(0.3, release.set).start()
    with ws.connect(read_only=True) as con:
        # it opened only once the writer was told to close (ordering, not a clock)
        assert release.is_set()
        assert con.execute("SELECT x FROM t").fetchone() == (42,)
    thread.join(10)


def test_a_nested_connection_in_the_other_mode_fails_instead_of_deadlocking(tmp_path):
    ws = Workspace.resolve(tmp_path / "w.duckdb")
    with ws.connect() as con:
        con.execute("CREATE TABLE t (x INT)")
        with pytest.raises(WorkspaceError, match="different configuration"), \
                ws.connect(read_only=True):
            pass


def test_default_location_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVEFIT_WORKSPACE", raising=False)
    monkeypatch.delenv("SERVEFIT_APP_HOME", raising=False)
    assert Workspace.resolve().path == Path(".servefit") / "workspace.duckdb"
    monkeypatch.setenv("SERVEFIT_APP_HOME", str(tmp_path / "home"))
    assert Workspace.resolve().path == tmp_path / "home" / "workspace.duckdb"
    monkeypatch.setenv("SERVEFIT_WORKSPACE", str(tmp_path / "w.duckdb"))
    assert Workspace.resolve().path == tmp_path / "w.duckdb"
    assert Workspace.resolve(tmp_path / "x.duckdb").path == tmp_path / "x.duckdb"
