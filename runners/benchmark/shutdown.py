"""How a run ends when its process is told to, or dies: SIGTERM stops a run as Ctrl-C does
(`sigterm_interrupts`, for the parent), and load workers never outlive their parent
(`die_with_parent` and `parent_alive`, for the workers).

A worker asks Linux for a parent-death signal (prctl PR_SET_PDEATHSIG: SIGKILL when the thread
that started it exits, whatever killed it, kill -9 included); elsewhere, and for the moment
before the request takes effect, the worker watches its parent's pid itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class Termination:
    """Whether SIGTERM arrived while `sigterm_interrupts` was in force."""

    received: bool = False


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[Termination]:
    """While inside, SIGTERM does what Ctrl-C does: it goes to the SIGINT handler in force
    (asyncio's, which cancels the run so it tears down its workers and server and is stored
    `incomplete`), else raises KeyboardInterrupt. The yielded record says whether it came.
    Outside the main thread (where Python delivers signals) it changes nothing."""
    seen = Termination()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        seen.received = True
        on_int = signal.getsignal(signal.SIGINT)
        if callable(on_int):
            on_int(signum, frame)
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent(parent_pid: int) -> None:
    """In a worker: have the kernel SIGKILL this process when its parent dies (Linux), and
    exit now when the parent `parent_pid` is already gone (it died before the request)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if not parent_alive(parent_pid):
        os._exit(1)


def parent_alive(parent_pid: int) -> bool:
    """Whether this process's parent is still `parent_pid` (an orphan is re-parented)."""
    return os.getppid() == parent_pid
