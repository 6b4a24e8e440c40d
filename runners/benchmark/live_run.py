"""One benchmark run while it goes: its state (`LiveRun`: its inputs and what it has seen so
far), what each finished request adds to it (`result_handler`), and what watches it: the
progress reporter (a `ProgressSample` every PROGRESS_INTERVAL_S, `progress_line` for a
terminal) and the health watchdog that halts the run once the server stops answering. Driving
the run is `runners.benchmark.bench`; its report is `runners.benchmark.bench_report`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

import numpy as np
from pydantic import Field

from core.records import Record
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.boundary import BoundaryStep
from runners.benchmark.store import RunRecorder
from runners.load.client import get_status
from runners.load.schedule import Schedule
from runners.load.schemas import RequestResult
from runners.server.engine_metrics import MetricSample
from runners.server.scrape import Scraper

PROGRESS_INTERVAL_S = 0.5
HEALTH_INTERVAL_S = 1.0
HEALTH_TIMEOUT_S = 2.0  # bound on one health check
HEALTH_FAILURES = 3  # consecutive failed health checks that mean the server is gone

# The live TTFT median is over the latest finished requests: cheap at any run length (the
# progress sample never walks every result) and it shows the run's present, not its average.
RECENT_TTFTS = 1024


class ProgressSample(Record):
    """A live view of the run, every PROGRESS_INTERVAL_S."""

    elapsed_s: float
    completed: int
    errors: int
    throughput_rps: float = Field(description="Completed per second since the run began.")
    ttft_p50_s: float | None = Field(description="Median TTFT of the latest RECENT_TTFTS "
                                     "finished requests.")
    queue_depth: float | None = Field(description="Last scraped queue depth.")
    running: float | None = Field(description="Last scraped running requests.")
    level: int | None = Field(default=None, description="Sweep: the concurrency level being run.")


@dataclass
class LiveRun:
    """One run in progress: its inputs and what it has seen so far."""

    request: BenchRequest
    schedules: list[tuple[int | None, Schedule]]
    url: str
    health_url: str | None
    origin_s: float
    recorder: RunRecorder | None = None
    completed: int = 0
    errors: int = 0
    recent_ttfts_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TTFTS))
    metrics: list[MetricSample] = field(default_factory=list)
    level: int | None = None
    warmup_requests: int = 0
    measured_from_s: float = 0.0  # perf_counter when the measured load began (after warm-up)
    server_gone: str | None = None
    # The watchdog's first health check passed: only then can the server "stop" answering
    # (a health path that never answered says nothing about the run).
    health_armed: bool = False
    scraper: Scraper | None = None
    boundary_steps: list[BoundaryStep] = field(default_factory=list)


def result_handler(live: LiveRun, schedule: Schedule, offset: int, start_s: float
                   ) -> Callable[[int, RequestResult], None]:
    level, recorder = live.level, live.recorder
    assert recorder is not None

    def on_result(index: int, result: RequestResult) -> None:
        if schedule.open_loop:  # boundary steps name their phase after their load
            phase = schedule.request(index).phase
        elif level is not None:
            phase = f"c{level}"
        else:  # closed-loop pools: the phase at its send (offset from just before the start)
            phase = schedule.phase_at(result.sent_at_s - start_s)
        if result.success:
            live.completed += 1
            if (ttft := result.ttft_s) is not None:
                live.recent_ttfts_s.append(ttft)
        else:
            live.errors += 1
        recorder.add_result(offset + index, result, phase)

    return on_result


async def healthy(url: str) -> bool:
    def get() -> bool:
        try:
            return get_status(url, timeout_s=HEALTH_TIMEOUT_S) == 200
        except (http.client.HTTPException, OSError, ValueError):
            return False  # refused, silent past the timeout, or not speaking HTTP

    return await asyncio.to_thread(get)


async def watchdog(url: str, live: LiveRun, halt: asyncio.Event, done: asyncio.Event) -> None:
    """Halt the run when the server fails HEALTH_FAILURES health checks in a row. Armed only
    if the first check passes (an endpoint may not serve the plug-in's health path)."""
    if not await healthy(url):
        live.health_url = None
        return
    live.health_armed = True
    failures = 0
    while not done.is_set():
        failures = 0 if await healthy(url) else failures + 1
        if failures >= HEALTH_FAILURES:
            live.server_gone = (f"the server stopped answering its health check ({url}) "
                                f"during the run")
            halt.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), HEALTH_INTERVAL_S)


async def reporter(progress: Callable[[ProgressSample], None], live: LiveRun,
                   done: asyncio.Event) -> None:
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), PROGRESS_INTERVAL_S)
        if not done.is_set():
            progress(progress_sample(live))


def progress_sample(live: LiveRun) -> ProgressSample:
    elapsed = perf_counter() - live.origin_s
    ttfts = list(live.recent_ttfts_s)
    latest: dict[str, float] = {}
    for m in live.metrics[-64:]:
        latest[m.key] = m.value
    return ProgressSample(
        elapsed_s=elapsed, completed=live.completed, errors=live.errors,
        throughput_rps=live.completed / elapsed if elapsed > 0 else 0.0,
        ttft_p50_s=float(np.median(ttfts)) if ttfts else None,
        queue_depth=latest.get("queue_depth"), running=latest.get("running"), level=live.level)


def progress_line(sample: ProgressSample) -> str:
    """One status line for a terminal."""
    ttft = "-" if sample.ttft_p50_s is None else f"{sample.ttft_p50_s * 1e3:.0f} ms"
    queue = "-" if sample.queue_depth is None else f"{sample.queue_depth:g}"
    level = "" if sample.level is None else f"concurrency {sample.level}  "
    return (f"{level}{sample.elapsed_s:6.1f} s  done {sample.completed}  errors "
            f"{sample.errors}  {sample.throughput_rps:.2f} req/s  TTFT p50 {ttft}  "
            f"queue {queue}")
