"""The `bench` options made into a run: `build_request`, the one translation of `BenchOptions`
into a `BenchRequest` for every front end (the CLI and the Validate view), with each workload
kind's `WorkloadSpec` fields and the defaults the CLI fills; and `bench`, which builds the
request and runs it. The `slo_*_ms` options become seconds here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.errors import UsageError
from profiler.workspace import Workspace
from runners.benchmark.analyses import SOAK_WINDOWS
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_report import BenchReport
from runners.benchmark.bench_request import DEFAULT_SWEEP_CAP, BenchRequest
from runners.benchmark.options import BenchOptions, launch_spec
from runners.load.workload_spec import WorkloadSpec
from runners.load.workloads import BENCH_KINDS

if TYPE_CHECKING:
    from engines.config import EngineConfig

DEFAULT_NUM_REQUESTS = 100
DEFAULT_SWEEP_REQUESTS = 32
DEFAULT_GAMMA_CV = 2.0
DEFAULT_PEAK_FACTOR = 4.0

# WorkloadSpec field → the option that sets it, for error messages.
_FLAGS = {"rate_rps": "--rate", "base_rate_rps": "--rate", "duration_s": "--duration-s",
          "num_requests": "--num-requests", "prompt_tokens": "--prompt-tokens",
          "output_tokens": "--output-tokens", "concurrency": "--concurrency",
          "window_s": "--duration-s", "trace_path": "--trace"}


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
        UsageError: a missing field for the workload, an unreadable rec.json.
    """
    launch = launch_spec(options, config) if options.launch else None
    workload = _WORKLOAD_FIELDS[options.workload](options)
    if workload["kind"] == "trace" or (workload["kind"] == "boundary" and options.trace):
        workload["workspace"] = str(Workspace.resolve(workspace).path)
        if replay_workspace:
            workload["trace_path"] = None
    try:
        return BenchRequest(
            endpoint_url=options.endpoint, launch=launch, model=options.model,
            engine=options.engine,
            workload=WorkloadSpec.model_validate(workload),
            sweep_max_concurrency=(options.concurrency or DEFAULT_SWEEP_CAP)
            if options.workload == "sweep" else None,
            api=options.api, slo_ttft_p95_s=_s(options.slo_ttft_p95_ms),
            slo_tpot_p95_s=_s(options.slo_tpot_p95_ms), workers=options.workers,
            vocab_size=options.vocab_size,
            timeout_s=options.timeout_s, warmup_s=options.warmup_s, seed=options.seed,
            isolate_load=isolate_load, argv=argv or [])
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        msg = re.sub(r"\b[a-z_]+\b", lambda m: _FLAGS.get(m.group(), m.group()), msg)
        raise UsageError(f"--workload {options.workload}: {msg}") from None


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _base(o: BenchOptions) -> dict[str, Any]:
    return {"prompt_tokens": o.prompt_tokens, "output_tokens": o.output_tokens, "seed": o.seed}


def _trace(o: BenchOptions) -> dict[str, Any]:
    return {**_base(o), "kind": "trace", "trace_path": o.trace, "time_scale": o.time_scale,
            "num_requests": o.num_requests, "duration_s": o.duration_s,
            "concurrency": o.concurrency}


def _rate(o: BenchOptions) -> dict[str, Any]:
    n = o.num_requests if o.num_requests or o.duration_s else DEFAULT_NUM_REQUESTS
    return {**_base(o), "kind": o.workload, "rate_rps": o.rate_rps, "num_requests": n,
            "duration_s": o.duration_s, "concurrency": o.concurrency,
            "gamma_cv": (o.gamma_cv or DEFAULT_GAMMA_CV) if o.workload == "gamma" else None}


def _closed(o: BenchOptions) -> dict[str, Any]:
    """A closed loop; a sweep is the closed loop at 1, 2, 4, … from level 1
    (`runners.benchmark.bench_request.schedules_of`)."""
    sweep = o.workload == "sweep"
    default = DEFAULT_SWEEP_REQUESTS if sweep else DEFAULT_NUM_REQUESTS
    n = o.num_requests if o.num_requests or o.duration_s else default
    return {**_base(o), "kind": "concurrency", "num_requests": n, "duration_s": o.duration_s,
            "concurrency": 1 if sweep else o.concurrency}


def _boundary(o: BenchOptions) -> dict[str, Any]:
    """The trace (or Poisson at --rate) replayed at increasing compression, --num-requests
    (default 100) or --duration-s per step."""
    n = o.num_requests if o.num_requests or o.duration_s else DEFAULT_NUM_REQUESTS
    return {**_base(o), "kind": "boundary", "trace_path": o.trace, "rate_rps": o.rate_rps,
            "time_scale": o.time_scale, "num_requests": n, "duration_s": o.duration_s,
            "concurrency": o.concurrency, "step_factor": o.step_factor,
            "max_steps": o.max_steps}


def _burst_fields(o: BenchOptions) -> dict[str, Any]:
    return {**_base(o), "kind": "burst", **_burst(o)}


def _soak(o: BenchOptions) -> dict[str, Any]:
    # the windows the soak analysis splits the run into
    window = o.duration_s / SOAK_WINDOWS if o.duration_s else None
    return {**_base(o), "kind": "soak", "duration_s": o.duration_s, "window_s": window,
            "rate_rps": o.rate_rps, "concurrency": o.concurrency}


# WorkloadSpec fields of each bench kind (defaults filled where the CLI allows).
_WORKLOAD_FIELDS: dict[str, Callable[[BenchOptions], dict[str, Any]]] = {
    "trace": _trace, "poisson": _rate, "gamma": _rate, "concurrency": _closed,
    "sweep": _closed, "burst": _burst_fields, "soak": _soak, "boundary": _boundary,
}
assert set(_WORKLOAD_FIELDS) == set(BENCH_KINDS)


def _burst(o: BenchOptions) -> dict[str, Any]:
    """--duration-s split steady / burst / steady in thirds unless --burst-s is given."""
    if o.duration_s is None or o.rate_rps is None:
        raise UsageError("--workload burst needs --rate (the steady rate) and --duration-s")
    burst = o.burst_s or o.duration_s / 3
    if burst >= o.duration_s:
        raise UsageError("--burst-s must be shorter than --duration-s")
    return {"base_rate_rps": o.rate_rps,
            "peak_rate_rps": o.peak_rate_rps or o.rate_rps * DEFAULT_PEAK_FACTOR,
            "steady_s": (o.duration_s - burst) / 2, "burst_s": burst}


def bench(options: BenchOptions, *, workspace: str | None = None, argv: list[str] | None = None,
          progress: Any = None, config: EngineConfig | None = None) -> BenchReport:
    """Build the request for `options` and run it in the workspace (default location);
    `config` is the launch config when the caller holds it (see `build_request`)."""
    request = build_request(options, workspace=workspace, argv=argv, config=config)
    return run_bench(request, workspace=Workspace.resolve(workspace), progress=progress)
