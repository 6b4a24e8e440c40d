"""What one live benchmark is asked to do (`BenchRequest`: where the server is or how to launch
it, and what load to send) and the schedules that request sends (`schedules_of`, one per sweep
level or boundary step, deterministic for its seed). Running it is `runners.benchmark.bench`;
the `bench` options become one in `runners.benchmark.from_options`.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator

from core.records import Record
from engines.config import EngineKind
from runners.load.client import check_http_url
from runners.load.schedule import Schedule
from runners.load.schemas import Api
from runners.load.workload_spec import WorkloadSpec
from runners.load.workloads import boundary_steps, build_schedule
from runners.server.launch_spec import LaunchSpec

DEFAULT_SWEEP_CAP = 64


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
