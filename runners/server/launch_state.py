"""A launch in progress: what it has started so far (`Running`: the command, the process or
the container, the log file), which teardown reads, and the `LaunchError` a failed start-up
raises from it (`failure`: the command with secrets masked, the log's last lines).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.server.docker_container import LogPump
from runners.server.launch_spec import LaunchError

_TAIL_LINES = 20
_TAIL_BYTES = 64 * 1024
_SECRET_HINTS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


@dataclass(slots=True)
class Running:
    """What teardown needs; filled in as start-up proceeds."""

    command: list[str] = field(default_factory=list)
    env_shown: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    container: str | None = None  # docker: the name, set before it is created
    client: Any = None  # docker: the Engine API client
    handle: Any = None  # docker: the started container
    pump: LogPump | None = None
    status: Callable[[str], None] = field(default=lambda _: None)

    def display(self) -> str:
        """The command for messages (shlex-quoted; secrets in env masked)."""
        shown = [f"{k}={_mask(k, v)}" for k, v in sorted(self.env_shown.items())]
        return shlex.join([*shown, *self.command]) if self.command else ""


def _mask(key: str, value: str) -> str:
    return "***" if any(h in key.upper() for h in _SECRET_HINTS) else value


def failure(reason: str, running: Running) -> LaunchError:
    return LaunchError(reason, command=running.display(), log_tail=_tail(running.log_path))


def _tail(path: Path | None, n: int = _TAIL_LINES) -> str:
    if path is None or not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
        lines = f.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])
