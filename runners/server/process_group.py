"""Ending a local server's process group: SIGTERM, SIGKILL after a grace, then a bounded wait
until no member is left (orphans reparented to init included). Starting the process is
`launch`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from typing import Any

_LOG = logging.getLogger(__name__)
REAP_BOUND_S = 10.0  # after SIGKILL: how long orphaned members may take to be reaped


def group_alive(pgid: int) -> bool:
    """True while any process (zombies included) is in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL after `grace_s`, wait until it is gone.

    A Ctrl-C while waiting escalates to SIGKILL at once (and is re-raised afterwards).
    Members reparented to init after the leader exits are waited for too (bounded).
    """
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    interrupted: KeyboardInterrupt | None = None
    _signal_group(pgid, signal.SIGTERM)
    try:
        _wait_gone(proc, pgid, grace_s)
    except KeyboardInterrupt as exc:
        interrupted = exc
    if group_alive(pgid) or proc.poll() is None:
        _signal_group(pgid, signal.SIGKILL)
        _wait_gone(proc, pgid, REAP_BOUND_S)
    if group_alive(pgid):
        _LOG.error("process group %d still present after SIGKILL", pgid)
    if interrupted is not None:
        raise interrupted


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(proc: subprocess.Popen[Any], pgid: int, bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=bound_s)
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)

