"""Multi-process load generation: one schedule shared by `workers` processes, results merged.

Worker `w` sends the schedule indices `i` with `i % workers == w` (closed loop: its share of the
concurrency), in its own process and event loop. All start at one instant chosen by the parent
once every worker is ready (perf_counter is CLOCK_MONOTONIC: the same clock in every process).
Results come back in small batches over a queue; the parent calls `on_result` for each, in
its own loop, so callers see the same interface as with one process. A stop reaches the
workers through a shared event; a worker that dies is a `RunnerError`, not a hang; a parent
that dies, however killed, takes its workers with it (runners.benchmark.shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
from time import perf_counter
from typing import Any

from core.errors import RunnerError
from core.loop import run_coroutine
from runners.benchmark.shutdown import die_with_parent, parent_alive
from runners.load.process import LoadOptions, OnResult, Prepared, Run, WorkloadOutcome, outcome
from runners.load.schedule import Schedule
from runners.load.schemas import RequestResult

BATCH_S = 0.02  # how often a worker ships its finished results
START_DELAY_S = 0.05  # from "all ready" to the shared start instant
POLL_S = 0.02
REAP_S = 5.0  # how long stopped workers get to send their last results and exit


def _worker(job: tuple[Any, Any, Any, tuple[int, int], int],
            chan: tuple[Any, Any, Any, Any]) -> None:
    """Process entry: run this worker's share, shipping `(index, result, phase)` batches.

    `job` is (schedule, options, prepared, (worker, workers), parent pid); `chan` is (queue,
    go event, halt event, shared start instant). The worker dies with its parent
    (runners.benchmark.shutdown): nobody would read its results, and its load must stop.
    """
    schedule, options, prep, part, parent = job
    die_with_parent(parent)
    out, go, halt, start_at = chan
    try:
        batch: list[tuple[int, RequestResult, str]] = []
        run = Run(schedule, options, prep, None, part)
        out.put(("ready", part[0], None))
        while not go.wait(POLL_S * 10):
            _exit_if_orphaned(parent)
        run_coroutine(_work(run, batch, out, halt, t0=start_at.value, parent=parent),
                      use_uvloop=options.use_uvloop)
        out.put(("results", part[0], batch))
        out.put(("done", part[0], halt.is_set()))
    except BaseException as exc:  # shipped to the parent, which raises it as one line
        out.put(("error", part[0], f"{type(exc).__name__}: {exc}"))


def _exit_if_orphaned(parent: int) -> None:
    """The fallback where no parent-death signal exists: stop sending, exit at once (a queue
    with no reader left could block a normal exit)."""
    if not parent_alive(parent):
        os._exit(1)


async def _work(run: Run, batch: list[Any], out: Any, halt: Any, *, t0: float,
                parent: int) -> None:
    stop = asyncio.Event()

    def keep(index: int, result: RequestResult) -> None:
        batch.append((index, result, run.results[index][1]))

    run.on_result = keep

    async def ship() -> None:
        while True:
            await asyncio.sleep(BATCH_S)
            _exit_if_orphaned(parent)
            if halt.is_set():
                stop.set()
            if batch:
                out.put(("results", run.worker, batch[:]))
                batch.clear()

    shipper = asyncio.create_task(ship())
    try:
        await run.run(stop, t0)
    finally:
        shipper.cancel()


class _Merge:
    """The parent's side: merged results, per-worker state, the first error."""

    def __init__(self, n: int, on_result: Any) -> None:
        self.results: dict[int, tuple[RequestResult, str]] = {}
        self.ready, self.done, self.n, self.on_result = 0, 0, n, on_result
        self.interrupted = False
        self.error: BaseException | None = None

    def take(self, msg: tuple[str, int, Any], halt: Any) -> None:
        kind, worker, payload = msg
        if kind == "ready":
            self.ready += 1
        elif kind == "done":
            self.done += 1
            self.interrupted |= bool(payload)
        elif kind == "error":
            self.error = self.error or RunnerError(f"load worker {worker} failed: {payload}")
            halt.set()
        else:
            for index, result, phase in payload:
                self.results[index] = (result, phase)
                if self.on_result is not None and self.error is None:
                    try:
                        self.on_result(index, result)
                    except Exception as exc:  # stops the run; re-raised at the end
                        self.error = exc
                        halt.set()


async def _pump(q: Any, procs: list[Any], merge: _Merge, halt: Any, until: str) -> None:
    """Take messages until every worker said `until` (ready/done) or one died.

    The queue is polled from the loop, not read by a blocking get in a thread: a stop cancels
    this coroutine, and a get left running in a thread would swallow a message (a result
    that _reap must still store)."""
    count = (lambda: merge.ready) if until == "ready" else (lambda: merge.done)
    while count() < merge.n and (merge.error is None or until == "done"):
        try:
            msg = q.get_nowait()
        except queue_mod.Empty:
            await asyncio.sleep(POLL_S)
            dead = [p for p in procs if p.exitcode is not None]
            if len(dead) > merge.done and q.empty():
                code = dead[0].exitcode
                raise RunnerError(f"a load worker died (exit code {code})") from None
            continue
        merge.take(msg, halt)
        if merge.error is not None and until == "ready":
            return


async def run_processes(schedule: Schedule, options: LoadOptions, prep: Prepared,
                        on_result: OnResult | None,
                        stop: asyncio.Event | None) -> WorkloadOutcome:
    """`run_workload` over `options.workers` processes; the same outcome as one process."""
    ctx = mp.get_context("spawn")
    q, go, halt, start_at = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Value("d", 0.0)
    n = options.workers
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=((schedule, options, prep, (w, n), os.getpid()),
                               (q, go, halt, start_at)))
             for w in range(n)]
    for p in procs:
        p.start()
    merge = _Merge(n, on_result)
    watch = asyncio.create_task(_halt_on(stop, halt)) if stop is not None else None
    try:
        await _pump(q, procs, merge, halt, "ready")
        start_at.value = perf_counter() + START_DELAY_S
        go.set()
        await _pump(q, procs, merge, halt, "done")
    finally:
        if watch is not None:
            watch.cancel()
        _reap(procs, halt, go, q, merge)
    if merge.error is not None:
        raise merge.error
    return outcome(schedule, merge.results, start_at.value, merge.interrupted)


async def _halt_on(stop: asyncio.Event, halt: Any) -> None:
    await stop.wait()
    halt.set()


def _reap(procs: list[Any], halt: Any, go: Any, q: Any, merge: _Merge) -> None:
    """Make every worker end: ask, take what they still send for a little while (a stopped
    run keeps those results, and a worker cannot exit before its queue is read), then
    terminate the ones still running."""
    halt.set()
    go.set()
    deadline = perf_counter() + REAP_S
    while any(p.is_alive() for p in procs) and perf_counter() < deadline:
        _take_waiting(q, merge, halt, wait_s=POLL_S)
    _take_waiting(q, merge, halt, wait_s=0.0)
    for p in procs:
        if p.is_alive():
            p.terminate()
            with contextlib.suppress(Exception):
                p.join(timeout=2)


def _take_waiting(q: Any, merge: _Merge, halt: Any, *, wait_s: float) -> None:
    """Merge the messages waiting on `q` (the first waited for up to `wait_s`)."""
    try:
        msg = q.get(True, wait_s) if wait_s > 0 else q.get_nowait()
        while True:
            merge.take(msg, halt)
            msg = q.get_nowait()
    except queue_mod.Empty:
        return
