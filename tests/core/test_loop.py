"""`core.loop`: running loop-owning code from any thread, coroutines, and stop events."""

from __future__ import annotations

import asyncio
import threading

import pytest

from core.loop import run_coroutine, run_outside_loop, watch_stop


def test_run_outside_loop_runs_in_place_without_a_loop():
    assert run_outside_loop(threading.get_ident) == threading.get_ident()


def test_run_outside_loop_from_inside_a_loop_uses_another_thread():
    def needs_its_own_loop() -> tuple[int, int]:
        return threading.get_ident(), asyncio.run(asyncio.sleep(0, result=41)) + 1

    async def caller() -> tuple[int, int]:
        return run_outside_loop(needs_its_own_loop)

    ident, value = asyncio.run(caller())
    assert value == 42 and ident != threading.get_ident()


def test_run_outside_loop_reraises_the_exception():
    def boom() -> None:
        raise KeyError("from the worker")

    async def caller() -> None:
        run_outside_loop(boom)

    with pytest.raises(KeyError, match="from the worker"):
        asyncio.run(caller())
    with pytest.raises(KeyError, match="from the worker"):
        run_outside_loop(boom)


def test_run_coroutine_returns_the_value():
    async def work() -> list[int]:
        await asyncio.sleep(0)
        return [1, 2, 3]

    assert run_coroutine(work()) == [1, 2, 3]
    assert run_coroutine(work(), use_uvloop=True) == [1, 2, 3]  # with or without uvloop


def test_run_coroutine_reraises():
    async def fail() -> None:
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        run_coroutine(fail())


def test_watch_stop_sets_halt_once_the_thread_event_is_set():
    stop = threading.Event()

    async def main() -> bool:
        halt = asyncio.Event()
        task = asyncio.create_task(watch_stop(stop, halt))
        await asyncio.sleep(0.05)
        assert not halt.is_set()
        threading.Timer(0.05, stop.set).start()  # set from another thread, as a UI would
        await asyncio.wait_for(halt.wait(), timeout=5)
        await task
        return halt.is_set()

    assert run_coroutine(main())


def test_watch_stop_returns_when_done_without_halting():
    async def main() -> bool:
        halt, done = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(watch_stop(threading.Event(), halt, done))
        done.set()
        await asyncio.wait_for(task, timeout=5)
        return halt.is_set()

    assert run_coroutine(main()) is False
