"""A live benchmark from start to end (`run_bench`): bring the server up (or reach it), scrape
its metrics, run the workload (or a concurrency sweep to the knee, or a boundary's steps until
one breaks), store every result as it finishes, summarize and analyse, and always tear the
server down. The request is `runners.benchmark.bench_request`, the run's state while it goes
`runners.benchmark.live_run`, what it produced `runners.benchmark.bench_report`.

Run status in the store: `running` while it goes; `complete` when every request was accounted
for; `incomplete` when stopped (stop event, Ctrl-C, SIGTERM through
`runners.benchmark.shutdown.sigterm_interrupts`); `failed` on an error, when the server stopped
answering its health check during the run, or when no request succeeded or more than
`runners.benchmark.metrics.FAILED_ERROR_RATE` of them failed (`run_failure`, the dominant error
kept as the run's error). Rows measured so far are kept in all cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from time import perf_counter

import numpy as np

from core.load import ClosedLoop, FixedLengths, LoadSpec
from core.loop import run_coroutine, run_outside_loop, watch_stop
from core.run_shape import Boundary
from engines.config import EngineConfig
from engines.registry import get_engine
from profiler.workspace import Workspace
from runners.benchmark.analyses import find_knee
from runners.benchmark.bench_report import BenchReport, build_report, sweep_levels
from runners.benchmark.bench_request import BenchRequest, schedules_of
from runners.benchmark.boundary import judge_step, should_stop
from runners.benchmark.live_run import (
    LiveRun,
    ProgressSample,
    healthy,
    progress_sample,
    reporter,
    result_handler,
    watchdog,
)
from runners.benchmark.metrics import run_failure
from runners.benchmark.store import RunMeta, RunRecorder, RunStatus
from runners.load.failures import one_line
from runners.load.generator import run_workload
from runners.load.process import LoadOptions, WorkloadOutcome
from runners.load.prompts import server_root
from runners.load.schedule import kind_of, offered_rps
from runners.load.workloads import build_schedule
from runners.server.engine_metrics import MetricSample
from runners.server.launch import launched
from runners.server.launch_spec import LaunchError
from runners.server.scrape import Scraper

SCRAPE_TIMEOUT_S = 5.0  # bound on one /metrics scrape (and --timeout-s when lower)
WARMUP_CONCURRENCY = 4  # warm-up load for open-loop workloads (no concurrency of their own)


def run_bench(request: BenchRequest, *, workspace: Workspace,
              progress: Callable[[ProgressSample], None] | None = None,
              stop: threading.Event | None = None,
              launch_status: Callable[[str], None] | None = None) -> BenchReport:
    """Run `request` and store it in `workspace`; see the module docstring for statuses.
    `launch_status` hears what a launch is doing until the server is ready (e.g. a pull's
    progress).

    A run that ends failed (a broken server, the server gone mid-run) is returned with status
    `failed` and its `error`, as it is stored; only a run that cannot start or go on raises.

    Raises:
        RunnerError, LaunchError: bad setup or launch (a run that started, or a launch that
            failed, is stored failed).
        KeyboardInterrupt: after the run is stored as incomplete and the server torn down.
    """
    schedules = schedules_of(request)  # bad input fails here, before anything starts
    with contextlib.ExitStack() as stack:
        try:
            url, health_url = stack.enter_context(_serving(request, launch_status))
        except LaunchError as exc:  # kept in the store too, so the attempt shows under Runs
            _record_launch_failure(request, workspace, exc)
            raise
        live = LiveRun(request=request, schedules=schedules, url=url, health_url=health_url,
                       origin_s=perf_counter())
        return _run(live, workspace, progress, stop)


def _run_id(request: BenchRequest) -> str:
    return f"{kind_of(request.workload)}-{uuid.uuid4().hex[:10]}"


def _record_launch_failure(request: BenchRequest, workspace: Workspace,
                           exc: LaunchError) -> None:
    """A run row with status failed and the launch's reason: no request was sent."""
    recorder = RunRecorder(workspace, _meta(request, _run_id(request)), origin_s=perf_counter())
    recorder.start()
    recorder.finish("failed", error=one_line(f"the server did not start: {exc.reason}"))


@contextlib.contextmanager
def _serving(request: BenchRequest, status: Callable[[str], None] | None = None
             ) -> Iterator[tuple[str, str | None]]:
    """(base URL, health URL or None): the given endpoint, or a launched server."""
    if request.launch is None:
        url = (request.endpoint_url or "").rstrip("/")
        kind = request.engine or "vllm"
        probe = get_engine(kind).readiness(EngineConfig(engine=kind, model=request.model or "m"))
        yield url, server_root(url) + probe.health_path
        return
    spec = request.launch
    with launched(spec, status) as ep:
        ready = spec.probe or (get_engine(spec.config.engine).readiness(spec.config)
                               if spec.config else None)
        yield ep.url, ep.url + ready.health_path if ready else None


def _metric_names(request: BenchRequest) -> tuple[Mapping[str, tuple[str, ...]], str]:
    kind = request.engine or (request.launch.config.engine if request.launch
                              and request.launch.config else "vllm")
    plugin = get_engine(kind)
    return plugin.metric_names, plugin.metrics_path


def _run(live: LiveRun, workspace: Workspace, progress: Callable[[ProgressSample], None] | None,
         stop: threading.Event | None) -> BenchReport:
    request = live.request
    run_id = _run_id(request)
    recorder = live.recorder = RunRecorder(workspace, _meta(request, run_id),
                                           origin_s=live.origin_s)
    recorder.start()
    try:
        outcomes = run_outside_loop(lambda: run_coroutine(_drive(live, progress, stop)))
    except KeyboardInterrupt:
        recorder.finish("incomplete", error="interrupted")
        raise
    except BaseException as exc:
        recorder.finish("failed", error=one_line(f"{type(exc).__name__}: {exc}"))
        raise
    report = build_report(live, run_id, outcomes)
    analysis = report.model_dump(include={"levels", "knee", "burst", "soak", "scraped",
                                          "boundary"},
                                 exclude_none=True)
    cut_short = any(o.interrupted or o.unsent for _, o in outcomes)
    failure = live.server_gone or run_failure([r for _, o in outcomes for r in o.results])
    status: RunStatus = "failed" if failure else "incomplete" if cut_short else "complete"
    recorder.finish(status, summary=report.summary.model_dump(), analysis=analysis,
                    error=failure)
    return report.model_copy(update={"status": status, "error": failure})


def _meta(request: BenchRequest, run_id: str) -> RunMeta:
    config = request.launch.config.model_dump(mode="json") if request.launch and \
        request.launch.config else {"endpoint_url": request.endpoint_url}
    workload = request.workload.model_dump(mode="json")
    if request.warmup_s:
        workload["warmup_s"] = request.warmup_s
    return RunMeta(run_id=run_id, kind=kind_of(request.workload), argv=request.argv,
                   config=config, workload=workload)


async def _drive(live: LiveRun, progress: Callable[[ProgressSample], None] | None,
                 stop: threading.Event | None) -> list[tuple[int | None, WorkloadOutcome]]:
    """Scraper, watchdog, stop bridge and progress around the workload(s)."""
    halt, done = asyncio.Event(), asyncio.Event()
    names, path = _metric_names(live.request)
    health_url = live.health_url

    def sink(samples: list[MetricSample]) -> None:
        live.metrics.extend(samples)
        if live.recorder is not None:
            live.recorder.add_metrics(samples)

    scraper = live.scraper = Scraper(server_root(live.url) + path, names, sink=sink,
                                     interval_s=live.request.scrape_interval_s,
                                     timeout_s=min(SCRAPE_TIMEOUT_S, live.request.timeout_s))
    helpers = [asyncio.create_task(scraper.run(done))]
    if stop is not None:
        helpers.append(asyncio.create_task(watch_stop(stop, halt, done)))
    if health_url is not None:
        helpers.append(asyncio.create_task(watchdog(health_url, live, halt, done)))
    if progress is not None:
        helpers.append(asyncio.create_task(reporter(progress, live, done)))
    failed = True
    try:
        outcomes = await _workloads(live, halt)
        if live.health_url is not None and live.health_armed and live.server_gone is None \
                and not await healthy(live.health_url):
            live.server_gone = "the server stopped answering its health check during the run"
        failed = False
        return outcomes
    finally:
        done.set()
        if failed:  # no last scrape or health check from a server that just failed the run
            for task in helpers:
                task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        if progress is not None:
            progress(progress_sample(live))


async def _workloads(live: LiveRun, halt: asyncio.Event
                     ) -> list[tuple[int | None, WorkloadOutcome]]:
    """Each schedule in turn (sweep levels stop once past the knee, or when halted)."""
    request = live.request
    outcomes: list[tuple[int | None, WorkloadOutcome]] = []
    offset = 0
    if request.warmup_s > 0 and live.schedules[0][1].requests:
        await _warmup(live, halt)
    for level, schedule in live.schedules:
        live.level = level
        options = _load_options(live, request.seed)
        on_result = result_handler(live, schedule, offset, perf_counter())
        outcome = await run_workload(schedule, options, on_result=on_result, stop=halt)
        outcomes.append((level, outcome))
        offset += max(outcome.indices, default=-1) + 1
        if halt.is_set() or (level is not None and _enough(live, outcomes)):
            break
    return outcomes


def _enough(live: LiveRun, outcomes: list[tuple[int | None, WorkloadOutcome]]) -> bool:
    """The stepped runs' stop rules: a sweep past its knee; a boundary step that broke."""
    if not isinstance(live.request.workload.run, Boundary):
        return find_knee(sweep_levels(outcomes)).past_knee
    level, outcome = outcomes[-1]
    assert level is not None
    first, schedule = offered_rps(live.schedules[0][1]), live.schedules[level][1]
    offered = offered_rps(schedule)
    request = live.request
    live.boundary_steps.append(judge_step(
        level, offered / first if first > 0 else 1.0, offered, outcome.results,
        span=(outcome.started_at_s, outcome.ended_at_s),
        slo=(request.slo_ttft_p95_s, request.slo_tpot_p95_s), unsent=outcome.unsent))
    return should_stop(live.boundary_steps)


def _load_options(live: LiveRun, seed: int) -> LoadOptions:
    request = live.request
    return LoadOptions(url=live.url, model=request.model, api=request.api,
                       timeout_s=request.timeout_s, workers=request.workers,
                       isolate=request.isolate_load,
                       vocab_size=request.vocab_size, seed=seed)


async def _warmup(live: LiveRun, halt: asyncio.Event) -> None:
    """The unmeasured warm-up: first kernels, allocators and caches pay their cost here.

    Its prompts come from another seed, so they share no prefix with the measured ones."""
    request = live.request
    first = live.schedules[0][1]
    spec = LoadSpec(
        lengths=FixedLengths(
            input_tokens=int(np.median([r.input_tokens for r in first.requests])),
            output_tokens=int(np.median([r.output_tokens for r in first.requests]))),
        arrival=ClosedLoop(concurrency=first.concurrency or WARMUP_CONCURRENCY),
        duration_s=request.warmup_s, seed=request.seed + 1)
    outcome = await run_workload(build_schedule(spec), _load_options(live, request.seed + 1),
                                 stop=halt)
    live.warmup_requests = outcome.sent
    live.measured_from_s = perf_counter()
