"""Event-loop glue for synchronous callers (the CLI, Streamlit, worker processes).

`run_outside_loop` runs a function that starts its own loop, from any thread; `run_coroutine`
runs one coroutine on a fresh loop (uvloop when asked and installed); `watch_stop` turns a
thread's `threading.Event` into the running loop's `asyncio.Event`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")
# How often a thread's stop event is polled: a thread event cannot wake a loop, and 20 ms is
# well below any run's reaction time a user would notice.
STOP_POLL_S = 0.02


def run_outside_loop(fn: Callable[[], _T]) -> _T:
    """`fn()` here, or in a worker thread when this thread already runs an event loop (a
    function that starts its own loop cannot run inside one); its exception is re-raised."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    box: list[tuple[bool, Any]] = []
    thread = threading.Thread(target=lambda: box.append(_capture(fn)), daemon=True)
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _capture(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except BaseException as exc:  # handed back to the caller's thread
        return False, exc


def run_coroutine(coro: Coroutine[Any, Any, _T], *, use_uvloop: bool = False) -> _T:
    """Run `coro` to completion on a new loop of this thread (uvloop if asked and installed;
    it is optional: no Windows wheels) and return its result."""
    factory = None
    if use_uvloop:
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:
            factory = None
    box: list[_T] = []

    async def keep() -> None:  # the task returns None: asyncio would repr a big result
        box.append(await coro)

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(keep())
    return box[0]


async def watch_stop(stop: threading.Event, halt: asyncio.Event,
                     done: asyncio.Event | None = None) -> None:
    """Set `halt` (on the running loop) once `stop` (a thread's event) is set; return early
    when `done` is set. Run it as a task and cancel it when the work ends."""
    while not stop.is_set():
        if done is not None and done.is_set():
            return
        await asyncio.sleep(STOP_POLL_S)
    halt.set()
