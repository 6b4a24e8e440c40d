"""A live benchmark from start to end: bring the server up (or reach it), scrape its metrics,
run the workload (or a concurrency sweep to the knee, or a boundary's steps until one breaks),
store every result as it finishes, summarize and analyse, and always tear the server down.

Run status in the store: `running` while it goes; `complete` when every request was accounted
for; `incomplete` when stopped (stop event, Ctrl-C, SIGTERM through
`runners.benchmark.shutdown.sigterm_interrupts`); `failed` on an error, when the server stopped
answering its health check during the run, or when no request succeeded or more than
`runners.benchmark.metrics.FAILED_ERROR_RATE` of them failed (`run_failure`, the dominant error kept
as
the run's error). Rows measured so far are kept in all cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import Self

import numpy as np
from pydantic import Field, field_validator, model_validator

from core.loop import run_coroutine, run_outside_loop, watch_stop
from core.records import MutableRecord, Record
from engines.config import EngineConfig, EngineKind
from engines.registry import get_engine
from profiler.workspace import Workspace
from runners.benchmark.boundary import (
    BoundaryAnalysis,
    BoundaryStep,
    analyze_boundary,
    judge_step,
    should_stop,
)
from runners.benchmark.metrics import (
    BurstAnalysis,
    Knee,
    SoakAnalysis,
    Summary,
    SweepLevel,
    analyze_burst,
    analyze_soak,
    find_knee,
    run_failure,
    summarize,
)
from runners.benchmark.store import RunMeta, RunRecorder, RunStatus
from runners.load.client import check_http_url, get_status
from runners.load.failures import one_line
from runners.load.generator import run_workload
from runners.load.process import LoadOptions, WorkloadOutcome
from runners.load.prompts import server_root
from runners.load.schedule import Schedule, offered_rps
from runners.load.schemas import Api, RequestResult
from runners.load.workload_spec import WorkloadSpec
from runners.load.workloads import boundary_steps, build_schedule
from runners.server.engine_metrics import MetricSample, SpecMeasured, hit_rate, spec_measured
from runners.server.launch import launched
from runners.server.launch_spec import LaunchError, LaunchSpec
from runners.server.scrape import Scraper

PROGRESS_INTERVAL_S = 0.5
HEALTH_INTERVAL_S = 1.0
HEALTH_TIMEOUT_S = 2.0  # bound on one health check
SCRAPE_TIMEOUT_S = 5.0  # bound on one /metrics scrape (and --timeout-s when lower)
HEALTH_FAILURES = 3  # consecutive failed health checks that mean the server is gone
DEFAULT_SWEEP_CAP = 64
WARMUP_CONCURRENCY = 4  # warm-up load for open-loop workloads (no concurrency of their own)
# The live TTFT median is over the latest finished requests: cheap at any run length (the
# progress sample never walks every result) and it shows the run's present, not its average.
RECENT_TTFTS = 1024


class BenchRequest(Record):
    """One benchmark: where the server is (or how to launch it), and what load to send."""

    endpoint_url: str | None = Field(default=None,
                                     description="An already running server's base URL.")
    launch: LaunchSpec | None = Field(default=None,
                                      description="Launch (local | docker) and tear down.")
    engine: EngineKind | None = Field(
        default=None, description="Plug-in whose metric names are scraped; default the launch "
        "config's engine, else vllm.")
    model: str | None = Field(default=None, description="Served model name; None = the server's.")
    workload: WorkloadSpec
    sweep_max_concurrency: int | None = Field(
        default=None, ge=1, description="Sweep: run `workload` (kind concurrency) at 1, 2, 4, "
        "… up to this cap, stopping once past the knee.")
    api: Api = "completions"
    slo_ttft_p95_s: float | None = Field(default=None, gt=0)
    slo_tpot_p95_s: float | None = Field(default=None, gt=0)
    workers: int = Field(default=1, ge=1)
    isolate_load: bool = Field(
        default=False, description="Load generator in its own process(es) even with one "
        "worker: the Validate view's runs, whose host process also serves the app.")
    vocab_size: int | None = Field(default=None, gt=0, description="Top of prompt token ids, for "
                                   "servers without /tokenize; None = ask the server.")
    timeout_s: float = Field(default=600.0, gt=0, description="Bound on each request.")
    scrape_interval_s: float = Field(default=1.0, gt=0)
    warmup_s: float = Field(default=0.0,
                            ge=0, description="Unmeasured load first: a closed loop at the "
                            "workload's concurrency (else WARMUP_CONCURRENCY) with its median "
                            "lengths and unrelated prompts; results are not kept.")
    seed: int = 0
    argv: list[str] = Field(default_factory=list, description="Command line, for the record.")

    _url = field_validator("endpoint_url")(check_http_url)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.endpoint_url is None) == (self.launch is None):
            raise ValueError("give exactly one of endpoint_url or launch")
        if self.sweep_max_concurrency is not None and self.workload.kind != "concurrency":
            raise ValueError("a sweep runs a 'concurrency' workload at increasing levels")
        return self


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


class ScrapeSummary(Record):
    """What the engine's /metrics said over the run."""

    scrapes: int
    failures: int
    last_error: str | None
    prefix_cache_hit_rate: float | None = Field(description="Δhits / Δqueries over the run.")
    prefix_cache_hits_delta: float | None
    peak_queue_depth: float | None
    peak_running: float | None
    mean_kv_cache_usage: float | None
    speculative: SpecMeasured | None = Field(
        default=None, description="Speculative decoding as the engine counted it (None: no "
        "speculation, or an engine that exports no counts).")


# Mutable: the analyses (levels, knee, boundary, burst, soak) are added as the run ends.
class BenchReport(MutableRecord):
    """Everything one benchmark run produced (also stored under `run_id`)."""

    run_id: str
    status: str
    url: str
    model: str | None
    summary: Summary
    scraped: ScrapeSummary
    slo_met: bool | None = Field(description="p95 TTFT and TPOT within the given SLOs.")
    error: str | None = Field(default=None, description="Why the run failed (status failed).")
    warmup_requests: int = Field(default=0, description="Requests sent in the unmeasured warm-up.")
    levels: list[SweepLevel] | None = None
    knee: Knee | None = None
    burst: BurstAnalysis | None = None
    soak: SoakAnalysis | None = None
    boundary: BoundaryAnalysis | None = None


@dataclass
class _Live:
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
        live = _Live(request=request, schedules=schedules, url=url, health_url=health_url,
                     origin_s=perf_counter())
        return _run(live, workspace, progress, stop)


def _run_id(request: BenchRequest) -> str:
    return f"{request.workload.kind if not request.sweep_max_concurrency else 'sweep'}-" \
           f"{uuid.uuid4().hex[:10]}"


def _record_launch_failure(request: BenchRequest, workspace: Workspace,
                           exc: LaunchError) -> None:
    """A run row with status failed and the launch's reason: no request was sent."""
    recorder = RunRecorder(workspace, _meta(request, _run_id(request)), origin_s=perf_counter())
    recorder.start()
    recorder.finish("failed", error=one_line(f"the server did not start: {exc.reason}"))


def schedules_of(request: BenchRequest) -> list[tuple[int | None, Schedule]]:
    """What `request` sends, schedule by schedule: (sweep level or boundary step, or None for
    a single run; its schedule). Deterministic for the request's seed."""
    if request.workload.kind == "boundary":  # steps 0, 1, … at increasing compression
        return [(k, schedule) for k, (_, schedule) in enumerate(boundary_steps(request.workload))]
    if request.sweep_max_concurrency is None:
        return [(None, build_schedule(request.workload))]
    levels, c = [], 1
    while c <= request.sweep_max_concurrency:
        levels.append(c)
        c *= 2
    out: list[tuple[int | None, Schedule]] = []
    for c in levels:
        n = request.workload.num_requests
        spec = request.workload.model_copy(update={
            "concurrency": c, "num_requests": None if n is None else max(n, 4 * c)})
        out.append((c, build_schedule(spec)))
    return out


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


def _run(live: _Live, workspace: Workspace, progress: Callable[[ProgressSample], None] | None,
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
    report = _report(live, run_id, outcomes)
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
    if request.sweep_max_concurrency:
        workload["sweep_max_concurrency"] = request.sweep_max_concurrency
    if request.warmup_s:
        workload["warmup_s"] = request.warmup_s
    return RunMeta(run_id=run_id, kind="sweep" if request.sweep_max_concurrency
                   else request.workload.kind, argv=request.argv, config=config,
                   workload=workload)


# -- the run -----------------------------------------------------------------------------------


async def _drive(live: _Live, progress: Callable[[ProgressSample], None] | None,
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
        helpers.append(asyncio.create_task(_watchdog(health_url, live, halt, done)))
    if progress is not None:
        helpers.append(asyncio.create_task(_reporter(progress, live, done)))
    failed = True
    try:
        outcomes = await _workloads(live, halt)
        if live.health_url is not None and live.health_armed and live.server_gone is None \
                and not await _healthy(live.health_url):
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
            progress(_sample(live))


async def _workloads(live: _Live, halt: asyncio.Event
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
        on_result = _on_result(live, schedule, offset, perf_counter())
        outcome = await run_workload(schedule, options, on_result=on_result, stop=halt)
        outcomes.append((level, outcome))
        offset += max(outcome.indices, default=-1) + 1
        if halt.is_set() or (level is not None and _enough(live, outcomes)):
            break
    return outcomes


def _enough(live: _Live, outcomes: list[tuple[int | None, WorkloadOutcome]]) -> bool:
    """The stepped runs' stop rules: a sweep past its knee; a boundary step that broke."""
    if live.request.workload.kind != "boundary":
        return find_knee(_levels(outcomes)).past_knee
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


def _load_options(live: _Live, seed: int) -> LoadOptions:
    request = live.request
    return LoadOptions(url=live.url, model=request.model, api=request.api,
                       timeout_s=request.timeout_s, workers=request.workers,
                       isolate=request.isolate_load,
                       vocab_size=request.vocab_size, seed=seed)


async def _warmup(live: _Live, halt: asyncio.Event) -> None:
    """The unmeasured warm-up: first kernels, allocators and caches pay their cost here.

    Its prompts come from another seed, so they share no prefix with the measured ones."""
    request = live.request
    first = live.schedules[0][1]
    spec = WorkloadSpec(
        kind="concurrency", duration_s=request.warmup_s, seed=request.seed + 1,
        concurrency=first.concurrency or WARMUP_CONCURRENCY,
        prompt_tokens=int(np.median([r.input_tokens for r in first.requests])),
        output_tokens=int(np.median([r.output_tokens for r in first.requests])))
    outcome = await run_workload(build_schedule(spec), _load_options(live, request.seed + 1),
                                 stop=halt)
    live.warmup_requests = outcome.sent
    live.measured_from_s = perf_counter()


def _on_result(live: _Live, schedule: Schedule, offset: int, start_s: float
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


async def _healthy(url: str) -> bool:
    def get() -> bool:
        try:
            return get_status(url, timeout_s=HEALTH_TIMEOUT_S) == 200
        except (http.client.HTTPException, OSError, ValueError):
            return False  # refused, silent past the timeout, or not speaking HTTP

    return await asyncio.to_thread(get)


async def _watchdog(url: str, live: _Live, halt: asyncio.Event, done: asyncio.Event) -> None:
    """Halt the run when the server fails HEALTH_FAILURES health checks in a row. Armed only
    if the first check passes (an endpoint may not serve the plug-in's health path)."""
    if not await _healthy(url):
        live.health_url = None
        return
    live.health_armed = True
    failures = 0
    while not done.is_set():
        failures = 0 if await _healthy(url) else failures + 1
        if failures >= HEALTH_FAILURES:
            live.server_gone = (f"the server stopped answering its health check ({url}) "
                                f"during the run")
            halt.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), HEALTH_INTERVAL_S)


async def _reporter(progress: Callable[[ProgressSample], None], live: _Live,
                    done: asyncio.Event) -> None:
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), PROGRESS_INTERVAL_S)
        if not done.is_set():
            progress(_sample(live))


def _sample(live: _Live) -> ProgressSample:
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


# -- the report --------------------------------------------------------------------------------


def _levels(outcomes: list[tuple[int | None, WorkloadOutcome]]) -> list[SweepLevel]:
    out = []
    for level, o in outcomes:
        if level is None:
            continue
        s = summarize(o.results, started_at_s=o.started_at_s, ended_at_s=o.ended_at_s)
        out.append(SweepLevel(concurrency=level, request_throughput_rps=s.request_throughput_rps,
                              output_throughput_tok_s=s.output_throughput_tok_s,
                              e2e_p50_s=s.e2e_s.p50, ttft_p95_s=s.ttft_s.p95))
    return out


def _report(live: _Live, run_id: str, outcomes: list[tuple[int | None, WorkloadOutcome]]
            ) -> BenchReport:
    request = live.request
    results = [r for _, o in outcomes for r in o.results]
    t0 = outcomes[0][1].started_at_s if outcomes else live.origin_s
    t1 = outcomes[-1][1].ended_at_s if outcomes else live.origin_s
    summary = summarize(results, started_at_s=t0, ended_at_s=t1,
                        slo_ttft_s=request.slo_ttft_p95_s, slo_tpot_s=request.slo_tpot_p95_s)
    schedule = live.schedules[0][1]
    metrics = _since(live.metrics, live.measured_from_s)
    report = BenchReport(run_id=run_id, status="running", url=live.url, model=request.model,
                         summary=summary, scraped=_scraped(metrics, live.scraper),
                         slo_met=_slo_met(summary, request),
                         warmup_requests=live.warmup_requests)
    if request.sweep_max_concurrency:
        levels = _levels(outcomes)
        report.levels, report.knee = levels, find_knee(levels)
    elif request.workload.kind == "boundary":
        report.boundary = analyze_boundary(live.boundary_steps)
    elif outcomes and schedule.kind == "burst":
        report.burst = _burst(schedule, outcomes[0][1], live.metrics)
    elif outcomes and schedule.kind == "soak" and schedule.phases:
        report.soak = analyze_soak(results, t0=t0, t1=t0 + schedule.phases[-1].end_s,
                                   windows=len(schedule.phases))
    return report


def _burst(schedule: Schedule, outcome: WorkloadOutcome,
           metrics: list[MetricSample]) -> BurstAnalysis:
    phase = next(p for p in schedule.phases if p.name == "burst")
    t0 = outcome.started_at_s
    queue = [(m.at_s - t0, m.value) for m in metrics if m.key == "queue_depth"]
    return analyze_burst(outcome.results, t0=t0, burst_start_s=phase.start_s,
                         burst_end_s=phase.end_s, queue_depth=queue)


def _slo_met(summary: Summary, request: BenchRequest) -> bool | None:
    checks = [(request.slo_ttft_p95_s, summary.ttft_s.p95),
              (request.slo_tpot_p95_s, summary.tpot_s.p95)]
    if all(slo is None for slo, _ in checks):
        return None
    return summary.completed > 0 and all(
        slo is None or (p95 is not None and p95 <= slo) for slo, p95 in checks)


def _since(metrics: list[MetricSample], t_s: float) -> list[MetricSample]:
    """The samples of the measured part: from the last scrape at or before `t_s` on (the
    counters' baseline), so a warm-up's load and prefix hits do not count."""
    before = [m.at_s for m in metrics if m.at_s <= t_s]
    start = max(before) if before else t_s
    return [m for m in metrics if m.at_s >= start]


def _scraped(metrics: list[MetricSample], scraper: Scraper | None) -> ScrapeSummary:
    def values(key: str) -> list[float]:
        return [m.value for m in metrics if m.key == key]

    hits = values("prefix_cache_hits_tokens")
    kv = values("kv_cache_usage")
    return ScrapeSummary(
        scrapes=scraper.scrapes if scraper else 0,
        failures=scraper.failures if scraper else 0,
        last_error=scraper.last_error if scraper else None,
        prefix_cache_hit_rate=hit_rate(metrics),
        prefix_cache_hits_delta=hits[-1] - hits[0] if len(hits) >= 2 else None,
        peak_queue_depth=max(values("queue_depth"), default=None),
        peak_running=max(values("running"), default=None),
        mean_kv_cache_usage=sum(kv) / len(kv) if kv else None,
        speculative=spec_measured(metrics))
