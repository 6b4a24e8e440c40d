"""The `bench` command's options as one record (the CLI and the Validate view fill the same
fields), the one translation into a `BenchRequest` (`build_request`, used by both), the one
command line for a set of options (`bench_argv`, what the Validate view shows), and the JSON
report.

Milliseconds appear only here, at the edge: `slo_*_ms` in, `*_ms` out (DESIGN §2.4).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, get_args

from pydantic import Field, ValidationError, field_validator, model_validator

from core.errors import UsageError
from core.load import (
    MAX_CONCURRENCY,
    MAX_RATE_RPS,
    MAX_REQUESTS,
    MAX_TIME_SCALE,
    MAX_TOKENS,
    MIN_RATE_RPS,
)
from core.records import Record
from engines.base import GpuSelection
from engines.config import EngineKind
from profiler.workspace import APP_HOME_ENV_VAR, Workspace
from runners.benchmark.bench import (
    DEFAULT_SWEEP_CAP,
    BenchReport,
    BenchRequest,
    ProgressSample,
    run_bench,
)
from runners.benchmark.metrics import summary_json
from runners.load.client import check_http_url
from runners.load.schemas import Api
from runners.load.workload_spec import WorkloadSpec
from runners.load.workloads import BENCH_KINDS

if TYPE_CHECKING:
    from engines.config import EngineConfig
    from runners.server.launch_spec import LaunchSpec

BenchWorkload = Literal["trace", "poisson", "gamma", "concurrency", "sweep", "burst", "soak",
                        "boundary"]
assert set(get_args(BenchWorkload)) == set(BENCH_KINDS)  # the registry's kinds, typed
DEFAULT_LOG_DIR = Path(".servefit") / "logs"  # or logs/ in $SERVEFIT_APP_HOME when set
DEFAULT_NUM_REQUESTS = 100
DEFAULT_SWEEP_REQUESTS = 32
DEFAULT_GAMMA_CV = 2.0
DEFAULT_PEAK_FACTOR = 4.0
SOAK_WINDOWS = 10


# What one client machine can mean (the rest are core.load's): a typo of three zeros used to
# spawn processes without limit or grow memory by 500 MB every 3 s while ignoring Ctrl-C.
MAX_WORKERS = 64  # load-generator processes
MAX_RUN_S = 7 * 24 * 3600.0  # a week: a soak test's longest meaning

_DOCKER_GPUS = r"^(all|none|[1-9][0-9]*|device=[0-9]+(,[0-9]+)*)$"


class BenchOptions(Record):
    """What a user asks `bench` for; see `python -m app bench --help`."""

    endpoint: str | None = None
    launch: Literal["local", "docker"] | None = None
    config_path: str | None = Field(default=None,
                                    description="rec.json (EngineConfig or {config: …}).")
    engine_venv: str | None = Field(default=None, description="local: venv holding the engine.")
    log_dir: str | None = None
    model_cache_dir: str | None = Field(default=None, description="docker: host HF cache folder.")
    image: str | None = Field(default=None, description="docker: image (default: the engine's "
                              "official image at the pinned release).")
    docker_gpus: str = Field(default="all",
                             description="docker: GPUs as docker's --gpus says them: all, "
                             "none, a count, or device=0,1.")
    docker_network: Literal["bridge", "host"] = Field(
        default="bridge", description="docker: publish the port, or use the host's network.")
    pull: Literal["missing", "always", "never"] = Field(
        default="missing", description="docker: when to pull the image.")
    model: str | None = None
    engine: EngineKind | None = Field(default=None, description="Plug-in whose /metrics names are "
                                      "scraped (default: the config's engine, else vllm).")
    workload: BenchWorkload
    trace: str | None = None
    time_scale: float = Field(default=1.0, gt=0, le=MAX_TIME_SCALE, allow_inf_nan=False)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    rate_rps: float | None = Field(default=None, ge=MIN_RATE_RPS, le=MAX_RATE_RPS,
                                   allow_inf_nan=False)
    peak_rate_rps: float | None = Field(default=None, ge=MIN_RATE_RPS, le=MAX_RATE_RPS,
                                        allow_inf_nan=False)
    gamma_cv: float | None = Field(default=None, gt=0, le=100.0, allow_inf_nan=False)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_RUN_S, allow_inf_nan=False)
    burst_s: float | None = Field(default=None, gt=0, le=MAX_RUN_S, allow_inf_nan=False)
    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    api: Api = "completions"
    slo_ttft_p95_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    slo_tpot_p95_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    vocab_size: int | None = Field(default=None, gt=0, le=10_000_000)
    timeout_s: float = Field(default=600.0, gt=0, le=MAX_RUN_S, allow_inf_nan=False)
    warmup_s: float = Field(default=0.0, ge=0, le=MAX_RUN_S, allow_inf_nan=False)
    step_factor: float | None = Field(default=None, gt=1, le=1000.0, allow_inf_nan=False,
                                      description="boundary: load multiplier per step.")
    max_steps: int | None = Field(default=None, ge=1, le=1000,
                                  description="boundary: most steps.")
    seed: int = 0

    _endpoint = field_validator("endpoint")(check_http_url)

    @field_validator("docker_gpus")
    @classmethod
    def _gpus(cls, value: str) -> str:
        if not re.fullmatch(_DOCKER_GPUS, value):
            raise ValueError(f"{value!r}: expected all, none, a count (2) or device=0,1")
        return value

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.endpoint is None) == (self.launch is None):
            raise ValueError("give exactly one of --endpoint URL or --launch local|docker")
        if self.launch is not None and self.config_path is None:
            raise ValueError("--launch needs --config rec.json")
        if self.workload == "trace" and self.trace is None:
            raise ValueError("--workload trace needs --trace FILE")
        return self


_OPTION_FLAGS = {"rate_rps": "--rate", "peak_rate_rps": "--peak-rate",
                 "config_path": "--config"}


def parse_options(fields: dict[str, Any]) -> BenchOptions:
    """`BenchOptions` from loose fields; the first problem as one UsageError line."""
    try:
        return BenchOptions.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "_".join(str(p) for p in first["loc"])
        where = _OPTION_FLAGS.get(field, "--" + field.replace("_", "-")) if field else ""
        msg = first["msg"].removeprefix("Value error, ")
        raise UsageError(f"{where}: {msg}" if where else msg) from None


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
    launch = _launch_spec(options, config) if options.launch else None
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
    """A closed loop; a sweep is the closed loop at 1, 2, 4, … (runners.benchmark.bench) from level
    1."""
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


def _launch_spec(o: BenchOptions, config: EngineConfig | None) -> LaunchSpec:
    from engines.errors import EngineError
    from engines.export.bundle import served_config
    from engines.export.loading import load_request
    from runners.server.launch_spec import LaunchSpec

    if config is None:
        try:
            # What the export bundle would launch (e.g. TensorRT-LLM's FP8 checkpoint of the
            # model), so the run measures the quantization that was predicted.
            config = served_config(load_request(o.config_path or ""))
        except EngineError as exc:  # engines/ owns its own tree: map it at this edge
            raise UsageError(str(exc)) from None
    log_dir = Path(o.log_dir) if o.log_dir else default_log_dir()
    venv = Path(o.engine_venv) if o.engine_venv else None
    if venv is not None and not (venv / "bin").is_dir():
        raise UsageError(f"--engine-venv {venv}: no bin/ folder there (give a virtual "
                         "environment holding the engine)")
    if o.launch != "docker":
        return LaunchSpec(mode=o.launch or "local", config=config, log_dir=log_dir, venv=venv)
    cache: dict[str, Any] = {"model_cache_dir": o.model_cache_dir} if o.model_cache_dir else {}
    return LaunchSpec(mode="docker", config=config, log_dir=log_dir, image=o.image,
                      gpus=gpu_selection(o.docker_gpus), docker_network=o.docker_network,
                      pull=o.pull, **cache)


def default_log_dir() -> Path:
    """Engine logs: logs/ in $SERVEFIT_APP_HOME when set (the Docker image's volume), else
    .servefit/logs here."""
    home = os.environ.get(APP_HOME_ENV_VAR)
    return Path(home) / "logs" if home else DEFAULT_LOG_DIR


def gpu_selection(text: str) -> GpuSelection:
    """`--docker-gpus` (validated by its pattern) as the launcher takes it: all, none, a
    count, or `device=0,1` as a list of indices."""
    if text in ("all", "none"):
        return "all" if text == "all" else "none"
    if text.startswith("device="):
        return [int(i) for i in text.removeprefix("device=").split(",")]
    return int(text)


# Where a field goes on the command line: first the server and the workload, then the rest in
# field order (the CLI accepts any order; this one reads best).
_ARGV_FIRST = ("endpoint", "launch", "config_path", "model", "engine", "workload")


def bench_argv(options: BenchOptions, prefix: tuple[str, ...] = ("python", "-m", "app", "bench")
               ) -> list[str]:
    """The command line that asks for `options` (fields at their default are left out); the
    CLI's parser reads it back into equal options (numbers are written exactly)."""
    names = [*_ARGV_FIRST, *(n for n in BenchOptions.model_fields if n not in _ARGV_FIRST)]
    argv = list(prefix)
    for name in names:
        value = getattr(options, name)
        if value is None or value == BenchOptions.model_fields[name].default:
            continue
        flag = _OPTION_FLAGS.get(name, "--" + name.replace("_", "-"))
        argv += [flag, _arg(value)]
    return argv


def _arg(value: object) -> str:
    """A value as the CLI reads it back exactly (2.0 as "2", 0.1 as "0.1", never rounded)."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def bench(options: BenchOptions, *, workspace: str | None = None, argv: list[str] | None = None,
          progress: Any = None) -> BenchReport:
    """Build the request for `options` and run it in the workspace (default location)."""
    request = build_request(options, workspace=workspace, argv=argv)
    return run_bench(request, workspace=Workspace.resolve(workspace), progress=progress)


def report_json(report: BenchReport) -> dict[str, Any]:
    """`bench --json`: `predict`'s metric names (ms) plus the run's identity and analyses."""
    out: dict[str, Any] = {"run_id": report.run_id, "status": report.status, "url": report.url,
                           "error": report.error}
    out.update(summary_json(report.summary))
    out["slo_met"] = report.slo_met
    out["warmup_requests"] = report.warmup_requests
    out["scraped"] = report.scraped.model_dump()
    if report.knee is not None:
        out["knee_concurrency"] = report.knee.knee_concurrency
        out["levels"] = [lv.model_dump() for lv in report.levels or []]
    for name in ("burst", "soak", "boundary"):
        value = getattr(report, name)
        if value is not None:
            out[name] = value.model_dump()
    return out


def progress_line(sample: ProgressSample) -> str:
    """One status line for a terminal."""
    ttft = "-" if sample.ttft_p50_s is None else f"{sample.ttft_p50_s * 1e3:.0f} ms"
    queue = "-" if sample.queue_depth is None else f"{sample.queue_depth:g}"
    level = "" if sample.level is None else f"concurrency {sample.level}  "
    return (f"{level}{sample.elapsed_s:6.1f} s  done {sample.completed}  errors "
            f"{sample.errors}  {sample.throughput_rps:.2f} req/s  TTFT p50 {ttft}  "
            f"queue {queue}")
