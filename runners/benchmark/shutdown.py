"""How a run ends when its process is told to, or dies: SIGTERM stops a run as Ctrl-C does
(`sigterm_interrupts`, for the parent), a Ctrl-C is not lost when a library swallows its
KeyboardInterrupt (`ctrl_c_kept`, `raise_if_interrupted`, `forget_caught_interrupt`,
`asyncio_ctrl_c`), and load workers never outlive their parent (`die_with_parent` and
`parent_alive`, for the workers).

Why Ctrl-C gets lost: Python raises KeyboardInterrupt wherever the main thread is, and some
places drop it: code that catches BaseException (an import inside pandas was measured doing so:
Ctrl-C 1.5 s into `profile` let it finish, exit 0, and write its file), and a ctypes callback
(numba's compiler). The handler `ctrl_c_kept` installs still runs there, so it remembers.

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


@dataclass(eq=False)  # one block's record: `_KEPT` removes it by identity
class CtrlC:
    """Whether SIGINT (or SIGTERM, which takes its path) arrived while `ctrl_c_kept` was in
    force, whether or not its KeyboardInterrupt reached the command."""

    received: bool = False


# The records of the `ctrl_c_kept` blocks in force, innermost last: signal handlers are the
# process's, so the record they write is too. Empty outside the CLI's `main`.
_KEPT: list[CtrlC] = []


@contextlib.contextmanager
def ctrl_c_kept() -> Iterator[CtrlC]:
    """While inside, SIGINT is remembered before it raises KeyboardInterrupt, so that
    `raise_if_interrupted` raises it again where a library swallowed it. Changes nothing
    outside the main thread or where SIGINT is not Python's default handler (ignored by the
    shell that started the process, or an event loop's)."""
    seen = CtrlC()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield seen
        return

    def on_int(signum: int, frame: FrameType | None) -> None:
        seen.received = True
        signal.default_int_handler(signum, frame)

    _KEPT.append(seen)
    signal.signal(signal.SIGINT, on_int)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _KEPT.remove(seen)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt when a Ctrl-C came inside a `ctrl_c_kept` block: call it before
    a command writes what it computed, so a swallowed Ctrl-C still writes nothing.

    Raises:
        KeyboardInterrupt: a Ctrl-C (or SIGTERM) arrived.
    """
    if any(kept.received for kept in _KEPT):
        raise KeyboardInterrupt


def forget_caught_interrupt() -> None:
    """Call once a KeyboardInterrupt is caught and the command ends with its own exit code.

    CPython marks a KeyboardInterrupt that ends a string `exec` (dataclasses and numba build
    code that way) as unhandled even when a caller catches it, and under `python -m` an
    interpreter so marked kills itself with SIGINT at exit (exit status -2), whatever code
    the program exited with. A string `exec` clears the mark as it starts."""
    exec("pass", {})  # a constant: only its effect on the mark is wanted


@contextlib.contextmanager
def asyncio_ctrl_c() -> Iterator[None]:
    """Inside, SIGINT has Python's default handler again, for code that runs an event loop:
    asyncio installs its own Ctrl-C handler (which cancels the main task, so a run tears
    down and is stored) only where it finds the default one. `ctrl_c_kept`'s is back after."""
    kept = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread()
            or kept is signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, kept)


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
