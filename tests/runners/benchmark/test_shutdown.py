"""runners.benchmark.shutdown: SIGTERM turned into Ctrl-C's path, and a process that dies with its
parent however the parent is killed (issue 16, F4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runners.benchmark.shutdown import parent_alive, sigterm_interrupts

ROOT = Path(__file__).resolve().parents[3]


def test_sigterm_raises_keyboard_interrupt_inside_and_is_restored_after():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_interrupts() as term:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here, in the main thread
    assert term.received
    assert signal.getsignal(signal.SIGTERM) is before


def test_parent_alive_is_false_once_the_parent_pid_differs():
    assert parent_alive(os.getppid())
    assert not parent_alive(os.getppid() + 1)


# A middle process starts a child that calls die_with_parent and would sleep for a minute,
# prints the child's pid, then waits to be killed.
_MIDDLE = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import os, time\\n"
        "from runners.benchmark.shutdown import die_with_parent\\n"
        "die_with_parent(os.getppid())\\n"
        "print('armed', flush=True)\\n"
        "time.sleep(60)\\n"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "armed\\n"
    print(child.pid, flush=True)
    time.sleep(60)
""")


def _gone(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_when_its_parent_is_killed_with_sigkill():
    middle = subprocess.Popen([sys.executable, "-c", _MIDDLE], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        child = int(middle.stdout.readline())
        assert not _gone(child)
        middle.kill()  # SIGKILL: no handler, no cleanup in the parent
        middle.wait(timeout=10)
        deadline = time.monotonic() + 5
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gone(child)
    finally:
        middle.kill()


def test_a_swallowed_ctrl_c_is_raised_again_inside_ctrl_c_kept_only():
    from runners.benchmark.shutdown import ctrl_c_kept, raise_if_interrupted

    with ctrl_c_kept() as kept:
        raise_if_interrupted()  # nothing came yet
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises here
        except KeyboardInterrupt:
            pass  # what a library did
        assert kept.received
        with pytest.raises(KeyboardInterrupt):
            raise_if_interrupted()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    raise_if_interrupted()  # the block's record went with it


def test_asyncio_gets_the_default_ctrl_c_handler_it_looks_for():
    from runners.benchmark.shutdown import asyncio_ctrl_c, ctrl_c_kept

    with ctrl_c_kept():
        kept = signal.getsignal(signal.SIGINT)
        assert kept is not signal.default_int_handler
        with asyncio_ctrl_c():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is kept
