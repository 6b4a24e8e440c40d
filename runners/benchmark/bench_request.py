"""What one live benchmark is asked to do (`BenchRequest`: where the server is or how to launch
it, and what load to send: a `core.load.LoadSpec`) and the schedules that request sends
(`schedules_of`, by the load's run shape: one per sweep level or boundary step, deterministic
for its seed). Running it is `runners.benchmark.bench`;
the `bench` options become one in `runners.benchmark.from_options`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

from pydantic import Field, field_validator, model_validator

from core.load import ClosedLoop, LoadSpec
from core.records import Record
from core.run_shape import Sweep
from engines.config import EngineKind
from runners.load.client import check_http_url
from runners.load.schedule import Schedule
from runners.load.schemas import Api
from runners.load.workloads import boundary_steps, build_schedule
from runners.server.launch_spec import LaunchSpec


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
    workload: LoadSpec = Field(description="What to send; a sweep (`core.run_shape.Sweep`) "
                               "stops once past the knee, a boundary at the step that breaks.")
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
        return self


def schedules_of(request: BenchRequest) -> list[tuple[int | None, Schedule]]:
    """What `request` sends, schedule by schedule: (sweep level or boundary step, or None for
    a single run; its schedule). Deterministic for the request's seed."""
    return _RUNS[request.workload.run.kind](request.workload)


def _once(load: LoadSpec) -> list[tuple[int | None, Schedule]]:
    return [(None, build_schedule(load))]


def _steps(load: LoadSpec) -> list[tuple[int | None, Schedule]]:
    """A boundary's steps 0, 1, … at increasing compression."""
    return [(k, schedule) for k, (_, schedule) in enumerate(boundary_steps(load))]


def _levels(load: LoadSpec) -> list[tuple[int | None, Schedule]]:
    """A sweep's closed loop at its concurrency, twice it, … up to the cap; each level sends
    at least 4 requests per user."""
    sweep, loop = load.run, load.arrival
    assert isinstance(sweep, Sweep) and isinstance(loop, ClosedLoop)  # LoadSpec checks both
    out: list[tuple[int | None, Schedule]] = []
    c, n = loop.concurrency, load.num_requests
    while c <= sweep.max_concurrency:
        level = load.model_copy(update={"arrival": ClosedLoop(concurrency=c),
                                        "num_requests": None if n is None else max(n, 4 * c)})
        out.append((c, build_schedule(level)))
        c *= 2
    return out


_RUNS: dict[str, Callable[[LoadSpec], list[tuple[int | None, Schedule]]]] = {
    "single": _once, "soak": _once, "sweep": _levels, "boundary": _steps}
