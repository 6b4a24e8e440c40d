"""The `bench` command's options as one record (the CLI and the Validate view fill the same
fields), their translation into a `BenchRequest`, and the JSON report.

Milliseconds appear only here, at the edge: `slo_*_ms` in, `*_ms` out (DESIGN §2.4).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.errors import UsageError
from profiler.workspace import Workspace
from runners.bench import DEFAULT_SWEEP_CAP, BenchReport, BenchRequest, ProgressSample, run_bench
from runners.metrics import summary_json
from runners.schemas import Api

BenchWorkload = Literal["trace", "poisson", "gamma", "concurrency", "sweep", "burst", "soak"]
DEFAULT_LOG_DIR = Path(".servefit") / "logs"
DEFAULT_NUM_REQUESTS = 100
DEFAULT_SWEEP_REQUESTS = 32
DEFAULT_GAMMA_CV = 2.0
DEFAULT_PEAK_FACTOR = 4.0
SOAK_WINDOWS = 10


class BenchOptions(BaseModel):
    """What a user asks `bench` for; see `python -m app bench --help`."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = None
    launch: Literal["local", "docker"] | None = None
    config_path: str | None = Field(None, description="rec.json (EngineConfig or {config: …}).")
    engine_venv: str | None = Field(None, description="local: venv holding the engine.")
    log_dir: str | None = None
    model: str | None = None
    workload: BenchWorkload
    trace: str | None = None
    time_scale: float = Field(1.0, gt=0)
    concurrency: int | None = Field(None, ge=1)
    rate_rps: float | None = Field(None, gt=0)
    peak_rate_rps: float | None = Field(None, gt=0)
    gamma_cv: float | None = Field(None, gt=0)
    duration_s: float | None = Field(None, gt=0)
    burst_s: float | None = Field(None, gt=0)
    num_requests: int | None = Field(None, ge=1)
    prompt_tokens: int | None = Field(None, ge=1)
    output_tokens: int | None = Field(None, ge=1)
    api: Api = "completions"
    slo_ttft_p95_ms: float | None = Field(None, gt=0)
    slo_tpot_p95_ms: float | None = Field(None, gt=0)
    workers: int = Field(1, ge=1)
    vocab_size: int | None = Field(None, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    warmup_s: float = Field(0.0, ge=0)
    seed: int = 0

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
                  argv: list[str] | None = None) -> BenchRequest:
    """The `BenchRequest` for `options` (reads rec.json for --launch); a trace is ingested
    into `workspace` when the run starts.

    Raises:
        UsageError: a missing field for the workload, an unreadable rec.json.
    """
    launch = _launch_spec(options) if options.launch else None
    workload = _workload(options)
    if workload["kind"] == "trace":
        workload["workspace"] = str(Workspace.resolve(workspace).path)
    try:
        return BenchRequest(
            endpoint_url=options.endpoint, launch=launch, model=options.model,
            workload=workload,
            sweep_max_concurrency=(options.concurrency or DEFAULT_SWEEP_CAP)
            if options.workload == "sweep" else None,
            api=options.api, slo_ttft_p95_s=_s(options.slo_ttft_p95_ms),
            slo_tpot_p95_s=_s(options.slo_tpot_p95_ms), workers=options.workers,
            vocab_size=options.vocab_size,
            timeout_s=options.timeout_s, warmup_s=options.warmup_s, seed=options.seed,
            argv=argv or [])
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        msg = re.sub(r"\b[a-z_]+\b", lambda m: _FLAGS.get(m.group(), m.group()), msg)
        raise UsageError(f"--workload {options.workload}: {msg}") from None


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _workload(o: BenchOptions) -> dict[str, Any]:
    """WorkloadSpec fields for the chosen workload (defaults filled where the CLI allows)."""
    base: dict[str, Any] = {"prompt_tokens": o.prompt_tokens, "output_tokens": o.output_tokens,
                            "seed": o.seed}
    if o.workload == "trace":
        return {**base, "kind": "trace", "trace_path": o.trace, "time_scale": o.time_scale,
                "num_requests": o.num_requests, "duration_s": o.duration_s,
                "concurrency": o.concurrency}
    if o.workload in ("poisson", "gamma"):
        n = o.num_requests if o.num_requests or o.duration_s else DEFAULT_NUM_REQUESTS
        return {**base, "kind": o.workload, "rate_rps": o.rate_rps, "num_requests": n,
                "duration_s": o.duration_s, "concurrency": o.concurrency,
                "gamma_cv": (o.gamma_cv or DEFAULT_GAMMA_CV) if o.workload == "gamma" else None}
    if o.workload in ("concurrency", "sweep"):
        default = DEFAULT_SWEEP_REQUESTS if o.workload == "sweep" else DEFAULT_NUM_REQUESTS
        n = o.num_requests if o.num_requests or o.duration_s else default
        return {**base, "kind": "concurrency", "num_requests": n, "duration_s": o.duration_s,
                "concurrency": 1 if o.workload == "sweep" else o.concurrency}
    if o.workload == "burst":
        return {**base, "kind": "burst", **_burst(o)}
    window = o.duration_s / SOAK_WINDOWS if o.duration_s else None
    return {**base, "kind": "soak", "duration_s": o.duration_s, "window_s": window,
            "rate_rps": o.rate_rps, "concurrency": o.concurrency}


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


def _launch_spec(o: BenchOptions) -> Any:
    from engines.errors import EngineError
    from engines.export import load_request
    from runners.launch import LaunchSpec

    try:
        config = load_request(o.config_path or "").config
    except EngineError as exc:  # engines/ owns its own tree: map it at this edge
        raise UsageError(str(exc)) from None
    log_dir = Path(o.log_dir) if o.log_dir else DEFAULT_LOG_DIR
    venv = Path(o.engine_venv) if o.engine_venv else None
    if venv is not None and not (venv / "bin").is_dir():
        raise UsageError(f"--engine-venv {venv}: no bin/ folder there (give a virtual "
                         "environment holding the engine)")
    return LaunchSpec(mode=o.launch or "local", config=config, log_dir=log_dir,
                      venv=venv if o.launch == "local" else None)


def bench(options: BenchOptions, *, workspace: str | None = None, argv: list[str] | None = None,
          progress: Any = None) -> BenchReport:
    """Build the request for `options` and run it in the workspace (default location)."""
    request = build_request(options, workspace=workspace, argv=argv)
    return run_bench(request, workspace=Workspace.resolve(workspace), progress=progress)


def report_json(report: BenchReport) -> dict[str, Any]:
    """`bench --json`: `predict`'s metric names (ms) plus the run's identity and analyses."""
    out: dict[str, Any] = {"run_id": report.run_id, "status": report.status, "url": report.url}
    out.update(summary_json(report.summary))
    out["slo_met"] = report.slo_met
    out["warmup_requests"] = report.warmup_requests
    out["scraped"] = report.scraped.model_dump()
    if report.knee is not None:
        out["knee_concurrency"] = report.knee.knee_concurrency
        out["levels"] = [lv.model_dump() for lv in report.levels or []]
    for name in ("burst", "soak"):
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
