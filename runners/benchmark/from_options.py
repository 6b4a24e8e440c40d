"""The `bench` options made into a run: `build_request`, the one translation of `BenchOptions`
into a `BenchRequest` for every front end (the CLI and the Validate view): each `--workload`
name's `core.load.LoadSpec`, built directly with the defaults the CLI fills, a missing option
named by its flag; and `bench`, which builds the request and runs it. The `slo_*_ms` options
become seconds here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.errors import UsageError
from core.load import Burst, ClosedLoop, FixedLengths, LoadSpec, Rate, TraceWindow
from core.run_shape import DEFAULT_MAX_STEPS, DEFAULT_STEP_FACTOR, Boundary, Soak, Sweep
from profiler.workspace import Workspace
from runners.benchmark.analyses import SOAK_WINDOWS
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_report import BenchReport
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.options import BenchOptions, launch_spec
from runners.load.schedule import BENCH_KINDS

if TYPE_CHECKING:
    from engines.config import EngineConfig

DEFAULT_NUM_REQUESTS = 100
DEFAULT_SWEEP_REQUESTS = 32
DEFAULT_SWEEP_CAP = 64
DEFAULT_GAMMA_CV = 2.0
DEFAULT_PEAK_FACTOR = 4.0

# Where a trace is read: (the file ingested first, or None to replay what the workspace holds;
# the workspace's path).
TraceSource = tuple[str | None, str]


def build_request(options: BenchOptions, *, workspace: str | None = None,
                  argv: list[str] | None = None, config: EngineConfig | None = None,
                  replay_workspace: bool = False, isolate_load: bool = False) -> BenchRequest:
    """The `BenchRequest` for `options`, for every front end: the CLI and the Validate view.

    A trace is ingested into `workspace` when the run starts; `replay_workspace` replays what
    `workspace` already holds instead (the app's per-trace workspace, ingested with the
    trace's own options and read-only afterwards). `config` is the launch config when the
    caller holds it already; else --launch reads it from `options.config_path`.
    `isolate_load` sends from a worker process even with one worker (the app's server shares
    the view's process: its page reruns must not delay the sockets' reads).

    Raises:
        UsageError: a missing option for the workload, an unreadable rec.json.
    """
    launch = launch_spec(options, config) if options.launch else None
    source = (None if replay_workspace else options.trace, str(Workspace.resolve(workspace).path))
    try:
        return BenchRequest(
            endpoint_url=options.endpoint, launch=launch, model=options.model,
            engine=options.engine, workload=_LOADS[options.workload](options, source),
            api=options.api, slo_ttft_p95_s=_s(options.slo_ttft_p95_ms),
            slo_tpot_p95_s=_s(options.slo_tpot_p95_ms), workers=options.workers,
            vocab_size=options.vocab_size,
            timeout_s=options.timeout_s, warmup_s=options.warmup_s, seed=options.seed,
            isolate_load=isolate_load, argv=argv or [])
    except ValidationError as exc:  # the load's own checks, already in the CLI's words
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise UsageError(f"--workload {options.workload}: {msg}") from None


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _lengths(o: BenchOptions) -> FixedLengths:
    if o.prompt_tokens is None or o.output_tokens is None:
        missing = [flag for flag, v in (("--prompt-tokens", o.prompt_tokens),
                                        ("--output-tokens", o.output_tokens)) if v is None]
        raise UsageError(f"--workload {o.workload} needs {', '.join(missing)}")
    return FixedLengths(input_tokens=o.prompt_tokens, output_tokens=o.output_tokens)


def _count(o: BenchOptions, default: int) -> int | None:
    """--num-requests; the default only when --duration-s does not bound the run either."""
    return o.num_requests if o.num_requests or o.duration_s else default


def _window(o: BenchOptions, source: TraceSource) -> TraceWindow:
    """The trace from its start, --duration-s of it, at --time-scale; --prompt-tokens and
    --output-tokens override its lengths."""
    return TraceWindow(path=source[0], workspace=source[1], duration_s=o.duration_s,
                       time_scale=o.time_scale, input_tokens=o.prompt_tokens,
                       output_tokens=o.output_tokens)


def _trace(o: BenchOptions, source: TraceSource) -> LoadSpec:
    return LoadSpec(lengths=_window(o, source), num_requests=o.num_requests,
                    max_in_flight=o.concurrency, seed=o.seed)


def _rate(o: BenchOptions, source: TraceSource) -> LoadSpec:
    """Poisson, or Gamma gaps (--gamma-cv, default 2), capped at --concurrency in flight."""
    if o.rate_rps is None:
        raise UsageError(f"--workload {o.workload} needs --rate")
    gamma = o.workload == "gamma"
    rate = Rate(rate_rps=o.rate_rps, process="gamma" if gamma else "poisson",
                cv=(o.gamma_cv or DEFAULT_GAMMA_CV) if gamma else 1.0)
    return LoadSpec(lengths=_lengths(o), arrival=rate, num_requests=_count(o, DEFAULT_NUM_REQUESTS),
                    duration_s=o.duration_s, max_in_flight=o.concurrency, seed=o.seed)


def _closed(o: BenchOptions, source: TraceSource) -> LoadSpec:
    if o.concurrency is None:
        raise UsageError("--workload concurrency needs --concurrency")
    return LoadSpec(lengths=_lengths(o), arrival=ClosedLoop(concurrency=o.concurrency),
                    num_requests=_count(o, DEFAULT_NUM_REQUESTS), duration_s=o.duration_s,
                    seed=o.seed)


def _sweep(o: BenchOptions, source: TraceSource) -> LoadSpec:
    """The closed loop at 1, 2, 4, … up to --concurrency (default 64)
    (`runners.benchmark.bench_request.schedules_of`)."""
    return LoadSpec(lengths=_lengths(o), arrival=ClosedLoop(concurrency=1),
                    num_requests=_count(o, DEFAULT_SWEEP_REQUESTS), duration_s=o.duration_s,
                    run=Sweep(max_concurrency=o.concurrency or DEFAULT_SWEEP_CAP), seed=o.seed)


def _burst(o: BenchOptions, source: TraceSource) -> LoadSpec:
    """--duration-s split steady / burst / steady in thirds unless --burst-s is given; the
    peak --peak-rate, default 4 × --rate."""
    if o.duration_s is None or o.rate_rps is None:
        raise UsageError("--workload burst needs --rate (the steady rate) and --duration-s")
    burst = o.burst_s or o.duration_s / 3
    if burst >= o.duration_s:
        raise UsageError("--burst-s must be shorter than --duration-s")
    arrival = Burst(base_rate_rps=o.rate_rps,
                    peak_rate_rps=o.peak_rate_rps or o.rate_rps * DEFAULT_PEAK_FACTOR,
                    steady_s=(o.duration_s - burst) / 2, burst_s=burst)
    return LoadSpec(lengths=_lengths(o), arrival=arrival, seed=o.seed)


def _soak(o: BenchOptions, source: TraceSource) -> LoadSpec:
    """--rate or --concurrency for --duration-s, in the windows the soak analysis splits the
    run into."""
    if o.duration_s is None:
        raise UsageError("--workload soak needs --duration-s")
    arrival: Rate | ClosedLoop
    if o.concurrency is not None and o.rate_rps is None:
        arrival = ClosedLoop(concurrency=o.concurrency)
    elif o.rate_rps is not None and o.concurrency is None:
        arrival = Rate(rate_rps=o.rate_rps)
    else:
        raise UsageError("--workload soak needs exactly one of --rate or --concurrency")
    return LoadSpec(lengths=_lengths(o), arrival=arrival, duration_s=o.duration_s,
                    run=Soak(window_s=o.duration_s / SOAK_WINDOWS), seed=o.seed)


def _boundary(o: BenchOptions, source: TraceSource) -> LoadSpec:
    """The trace (or Poisson at --rate) replayed at increasing compression, --num-requests
    (default 100) or --duration-s per step."""
    run = Boundary(step_factor=o.step_factor or DEFAULT_STEP_FACTOR,
                   max_steps=o.max_steps or DEFAULT_MAX_STEPS)
    n = _count(o, DEFAULT_NUM_REQUESTS)
    if o.trace is not None:
        return LoadSpec(lengths=_window(o, source), num_requests=n, max_in_flight=o.concurrency,
                        run=run, seed=o.seed)
    if o.rate_rps is None:
        raise UsageError("--workload boundary needs --trace FILE, or --rate with "
                         "--prompt-tokens and --output-tokens (Poisson)")
    return LoadSpec(lengths=_lengths(o), arrival=Rate(rate_rps=o.rate_rps), num_requests=n,
                    duration_s=o.duration_s, max_in_flight=o.concurrency, run=run, seed=o.seed)


# The load of each `--workload` name (defaults filled where the CLI allows).
_LOADS: dict[str, Callable[[BenchOptions, TraceSource], LoadSpec]] = {
    "trace": _trace, "poisson": _rate, "gamma": _rate, "concurrency": _closed,
    "sweep": _sweep, "burst": _burst, "soak": _soak, "boundary": _boundary,
}
assert set(_LOADS) == set(BENCH_KINDS)


def bench(options: BenchOptions, *, workspace: str | None = None, argv: list[str] | None = None,
          progress: Any = None, config: EngineConfig | None = None) -> BenchReport:
    """Build the request for `options` and run it in the workspace (default location);
    `config` is the launch config when the caller holds it (see `build_request`)."""
    request = build_request(options, workspace=workspace, argv=argv, config=config)
    return run_bench(request, workspace=Workspace.resolve(workspace), progress=progress)
