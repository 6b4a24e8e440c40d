"""The `bench` command's options as one record (the CLI and the Validate view fill the same
fields): read from loose fields (`parse_options`), the server launch they name
(`launch_spec`), and the one command line for a set of options (`bench_argv`, what the
Validate view shows). Options become a `BenchRequest` in `runners.benchmark.from_options`.

Milliseconds appear only at the edge: `slo_*_ms` in here, `*_ms` out in
`runners.benchmark.bench_report.report_json` (DESIGN §2.4).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, get_args

from pydantic import Field, ValidationError, field_validator, model_validator

from core.errors import UsageError, first_problem
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
from engines.config import MAX_GPUS_PER_INSTANCE, EngineKind
from engines.containers import check_cache_dir, check_image
from profiler.workspace import APP_HOME_ENV_VAR
from runners.load.client import check_http_url
from runners.load.schedule import BENCH_KINDS
from runners.load.schemas import Api

if TYPE_CHECKING:
    from engines.config import EngineConfig
    from runners.server.launch_spec import LaunchSpec

BenchWorkload = Literal["trace", "poisson", "gamma", "concurrency", "sweep", "burst", "soak",
                        "boundary"]
assert set(get_args(BenchWorkload)) == set(BENCH_KINDS)  # the registry's kinds, typed

# What one client machine can mean (the rest are core.load's): a typo of three zeros used to
# spawn processes without limit or grow memory by 500 MB every 3 s while ignoring Ctrl-C.
MAX_WORKERS = 64  # load-generator processes
MAX_RUN_S = 7 * 24 * 3600.0  # a week: a soak test's longest meaning
_DOCKER_GPUS = r"^(all|none|[1-9][0-9]*|device=[0-9]+(,[0-9]+)*)$"
DEFAULT_LOG_DIR = Path(".servefit") / "logs"  # or logs/ in $SERVEFIT_APP_HOME when set


class BenchOptions(Record):
    """What a user asks `bench` for; see `python -m app bench --help`."""

    endpoint: str | None = None
    launch: Literal["local", "docker"] | None = None
    config_path: str | None = Field(default=None,
                                    description="rec.json (EngineConfig, {config: …}, or a "
                                    "saved Recommendation read by the front end).")
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
            raise ValueError(f"{value[:40]!r}: expected all, none, a count (2) or device=0,1")
        numbers = [int(n) for n in re.findall(r"[0-9]+", value)]
        if len(numbers) > len(set(numbers)):
            raise ValueError(f"{value[:40]!r} names a GPU twice")
        if any(n > MAX_GPUS_PER_INSTANCE for n in numbers):
            raise ValueError(f"{value[:40]!r}: at most {MAX_GPUS_PER_INSTANCE:,} GPUs (the "
                             "largest instance a config may span)")
        return value

    _image = field_validator("image")(check_image)
    _cache_dir = field_validator("model_cache_dir")(check_cache_dir)

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
        path, msg = first_problem(exc)
        field = path.replace(".", "_")
        where = _OPTION_FLAGS.get(field, "--" + field.replace("_", "-")) if field else ""
        raise UsageError(f"{where}: {msg}" if where else msg) from None


def launch_spec(o: BenchOptions, config: EngineConfig | None) -> LaunchSpec:
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
    try:
        if o.launch != "docker":
            return LaunchSpec(mode=o.launch or "local", config=config, log_dir=log_dir,
                              venv=venv)
        cache: dict[str, Any] = ({"model_cache_dir": o.model_cache_dir} if o.model_cache_dir
                                 else {})
        return LaunchSpec(mode="docker", config=config, log_dir=log_dir, image=o.image,
                          gpus=gpu_selection(o.docker_gpus), docker_network=o.docker_network,
                          pull=o.pull, **cache)
    except ValidationError as exc:  # e.g. a default cache folder ($HOME) that cannot be one
        raise UsageError(first_problem(exc)[1]) from None


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
