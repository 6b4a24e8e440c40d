"""The DuckDB workspace file: where it lives, and opening it without leaving litter.

Default location `workspace.duckdb` in `$SERVEFIT_APP_HOME` when that is set (the Docker image
sets it to its writable volume), else `.servefit/workspace.duckdb` under the working directory;
`SERVEFIT_WORKSPACE` or an explicit path overrides it. A write that fails on a workspace it just
created removes the file again, so bad input leaves no trace.

Within one process DuckDB shares one database instance per file, and refuses a second connection
whose configuration differs ("read-only" against "read-write"), so connections to one file are
admitted here one configuration at a time: the app's sessions are threads of one process.

A Ctrl-C (or the CLI's SIGTERM) that stops a query comes out of DuckDB as its own error; every
query on a workspace connection re-raises it as the KeyboardInterrupt it was (`is_interrupt`).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import WorkspaceError

DEFAULT_RELATIVE_PATH = Path(".servefit") / "workspace.duckdb"
ENV_VAR = "SERVEFIT_WORKSPACE"
APP_HOME_ENV_VAR = "SERVEFIT_APP_HOME"  # the app's folder (app.storage); the CLI's too
# DuckDB's memory cap (e.g. "2GB"); past it DuckDB spills to `<workspace>.tmp/`. Unset: DuckDB's
# default, 80 % of RAM.
MEMORY_ENV_VAR = "SERVEFIT_MEMORY_LIMIT"
_MEMORY_RE = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$")
# What DuckDB's Python client raises when a signal handler raised while a query ran (it polls
# PyErr_CheckSignals and throws std::runtime_error, so KeyboardInterrupt becomes RuntimeError).
_QUERY_INTERRUPTED = "Query interrupted"


def is_interrupt(exc: BaseException) -> bool:
    """Whether `exc` is DuckDB's report of an interrupted query: its Python client's
    RuntimeError("Query interrupted") after Ctrl-C, or DuckDB's own InterruptException."""
    import duckdb

    return (isinstance(exc, RuntimeError) and str(exc) == _QUERY_INTERRUPTED) \
        or isinstance(exc, duckdb.InterruptException)


class _Admission:
    """Per-file gate: any number of connections of one mode; the other mode waits for them.

    A thread never waits for itself (a nested connection in the other mode gets DuckDB's own
    error rather than a deadlock).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open: dict[str, tuple[bool, list[int]]] = {}  # real path -> (read_only, threads)

    @contextmanager
    def admit(self, path: Path, read_only: bool) -> Iterator[None]:
        key, me = os.path.realpath(path), threading.get_ident()
        with self._cond:
            while ((held := self._open.get(key)) is not None and held[0] != read_only
                   and me not in held[1]):
                self._cond.wait()
            mode, threads = held if held is not None else (read_only, [])
            self._open[key] = (mode, [*threads, me])
        try:
            yield
        finally:
            with self._cond:
                mode, threads = self._open[key]
                threads.remove(me)
                if threads:
                    self._open[key] = (mode, threads)
                else:
                    del self._open[key]
                self._cond.notify_all()


_ADMISSION = _Admission()


@dataclass(frozen=True)
class Workspace:
    """A workspace file path. Nothing is opened or created until `connect`."""

    path: Path

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> Workspace:
        """`path`, else $SERVEFIT_WORKSPACE, else workspace.duckdb in $SERVEFIT_APP_HOME,
        else `.servefit/workspace.duckdb` here."""
        home = os.environ.get(APP_HOME_ENV_VAR)
        default = Path(home) / "workspace.duckdb" if home else DEFAULT_RELATIVE_PATH
        return cls(Path(path or os.environ.get(ENV_VAR) or default))

    def exists(self) -> bool:
        return self.path.is_file()

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[Any]:
        """Open the workspace (UTC session time zone); on error, undo a fresh creation.

        A thread of this process that holds the file in the other mode is waited for.
        """
        with _ADMISSION.admit(self.path, read_only), self._connect(read_only) as con:
            yield con

    @contextmanager
    def _connect(self, read_only: bool) -> Iterator[Any]:
        """The connection; an interrupted query (`is_interrupt`) leaves as KeyboardInterrupt."""
        import duckdb

        if read_only and not self.exists():
            raise WorkspaceError(f"no workspace at {self.path}: run `profile` on a trace first")
        created_dir = not self.path.parent.exists()
        created = not self.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = duckdb.connect(str(self.path), read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            raise WorkspaceError(f"cannot open workspace {self.path}: {exc}") from None
        except BaseException:  # Ctrl-C while DuckDB was creating the file: leave none behind
            if created:
                self._remove(created_dir)
            raise
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")
            limit = os.environ.get(MEMORY_ENV_VAR)
            if limit:
                con.execute(f"SET memory_limit = '{_memory_limit(limit)}'")
            yield con
        except BaseException as exc:
            con.close()
            if created:
                self._remove(created_dir)
            if is_interrupt(exc):
                raise KeyboardInterrupt from None
            raise
        else:
            con.close()

    def _remove(self, created_dir: bool) -> None:
        for suffix in ("", ".wal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        if created_dir:
            with suppress(OSError):
                self.path.parent.rmdir()


def _memory_limit(text: str) -> str:
    """A validated DuckDB size literal (it is interpolated: SET takes no parameters)."""
    value = text.strip()
    if not _MEMORY_RE.match(value):
        raise WorkspaceError(f"${MEMORY_ENV_VAR}={text!r}: expected a size such as 2GB or 512MiB")
    return value
