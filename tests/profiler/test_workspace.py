"""Workspace: location, memory cap, and no litter when opening fails."""

from __future__ import annotations

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
