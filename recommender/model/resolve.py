"""One resolve: (EngineConfig, GPU, model, load, fitted parameters) → the deployment that is
simulated, with nothing left unset.

Owns `Resolved`, `resolve` and its parameter-free half `prepare`: the config with the
engine's own choices written in (`recommender.model.defaults`), the memory plan, the scheduler
caps and policy (`recommender.sim.policies`), the step-time provider (an argument, the one the
parameters were fitted with), the engine's parameters as the harness sees them, and the step
formula's coefficients (`perf.StepCoefficients`). The simulator, the steady-state algebra,
capacity, reasons and the fit read this record; no other code fills a default.

Harnesses (`HARNESSES`): how the load reaches the engine, as a benchmark states it.
`served` goes through the engine's OpenAI API server (`vllm bench serve`, GuideLLM, the
Validate view); `in_process` drives the engine in-process (`trtllm-bench`, `vllm bench
throughput`, SGLang's offline throughput bench): no HTTP, tokenisation or per-token
streaming, so the fitted per-request API time and per-sampled-position output processing do
not apply (the sampler's GPU time is in the kernel efficiencies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from core.errors import UsageError
from engines.capability import check_moe_layout
from engines.config import EngineConfig
from engines.registry import get_engine
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import Filled, SchedulerCaps, fill, release_of
from recommender.model.memory import MemoryPlan, plan_memory
from recommender.model.params import EngineParams, PerfParams
from recommender.model.perf import (
    Batch,
    Deployment,
    StepCoefficients,
    deployment,
    step_coefficients,
    step_seconds,
)
from recommender.model.steptime import FALLBACK_KIND
from recommender.sim.policies import SchedulerPolicy, policy_for

Harness = Literal["served", "in_process"]


def _served(params: EngineParams) -> EngineParams:
    return params


def _in_process(params: EngineParams) -> EngineParams:
    return params.model_copy(update={"per_seq_overhead_s": 0.0, "request_overhead_s": 0.0,
                                     "closed_loop_gap_s": 0.0})


HARNESSES: dict[str, Callable[[EngineParams], EngineParams]] = {
    "served": _served,
    "in_process": _in_process,
}


def _serial_loop(params: EngineParams, engine: str, release: tuple[int, int] | None
                 ) -> EngineParams:
    """`params` with a serial-loop release's host time per sequence added to the
    per-sequence overhead (whatever the harness: the loop runs in-process too)."""
    if not get_engine(engine).serial_host_loop(release):
        return params
    return params.model_copy(update={
        "per_seq_overhead_s": params.per_seq_overhead_s + params.serial_loop_seq_s})


@dataclass(frozen=True, slots=True)
class Resolved:
    """One replica (one DP rank of an instance) of a deployment, fully resolved (the
    harness applied to `params`; max_model_len sizing is said by `defaults.fill`)."""

    config: EngineConfig  # every knob the engine would choose, written in
    caps: SchedulerCaps
    policy: SchedulerPolicy
    memory: MemoryPlan
    step: Deployment  # the model, GPU and shapes one step is priced with
    params: EngineParams  # the engine's fitted parameters, the harness applied
    coefficients: StepCoefficients
    table: np.ndarray  # the measured provider's kernel table; empty on the roofline
    step_time: str  # the provider that prices the step ("roofline" where it fell back)

    def step_seconds(self, batch: Batch) -> float:
        """Seconds one step of `batch` takes on this deployment (the one step formula)."""
        return step_seconds(self.coefficients, self.table, batch)

    @property
    def request_overhead_s(self) -> float:
        """Client-visible time per request outside the engine's steps."""
        return self.params.request_overhead_s

    @property
    def closed_loop_gap_s(self) -> float:
        """A closed-loop user's time from one answer to sending the next request."""
        return self.params.closed_loop_gap_s


def _engine_params(params: PerfParams | EngineParams, config: EngineConfig) -> PerfParams:
    if isinstance(params, EngineParams):  # one engine's parameters: no fallback fit
        return PerfParams(engines={config.engine: params})
    return params


@dataclass(frozen=True, slots=True)
class Prepared:
    """The half of `resolve` no fitted parameter changes: the config with the engine's
    choices written in (the release's memory fraction too) and its memory plan. A fit prices
    the same deployment thousands of times with other parameters; it prepares it once."""

    filled: Filled
    memory: MemoryPlan
    config: EngineConfig  # filled.config, with the release's memory fraction where it applies


def prepare(
    config: EngineConfig, gpu: GPU, model: ModelSpec, *, longest_tokens: int | None = None,
    engine_version: str | None = None, kv_block_tokens: int = 16,
) -> Prepared:
    """`resolve`'s parameter-free half (its arguments mean the same).

    Raises:
        UsageError: a config that does not fit in memory, or a max_model_len beyond the
            model's context.
        CapabilityError: expert or attention data parallelism asked of a dense model,
            or ep above the model's experts.
    """
    check_moe_layout(config, is_moe=model.is_moe, num_experts=model.num_experts)
    filled = fill(config, gpu, model, longest_tokens=longest_tokens,
                  engine_version=engine_version)
    memory = plan_memory(filled.config, gpu, model, block_size_tokens=kv_block_tokens,
                         engine_version=engine_version)
    if not memory.fits:
        raise UsageError("; ".join(r.reason for r in memory.risks if r.blocking))
    if engine_version is not None and memory.fraction_source == "engine_release":
        return Prepared(filled, memory, filled.config.model_copy(
            update={"gpu_memory_fraction": memory.gpu_memory_fraction}))
    return Prepared(filled, memory, filled.config)


def resolve(
    config: EngineConfig, gpu: GPU, model: ModelSpec, params: PerfParams | EngineParams, *,
    longest_tokens: int | None = None, harness: Harness = "served",
    engine_version: str | None = None, acceptance: float | None = None,
    kv_block_tokens: int = 16, prepared: Prepared | None = None,
) -> Resolved:
    """`config` on `gpu` serving `model`, resolved for a load whose longest request is
    `longest_tokens` (sizes an unset max_model_len and, without chunked prefill, the budget).

    The step-time provider is `params.step_time`; where it does not cover the cell the
    roofline prices the step with the fallback's own fit (`PerfParams.fallback`), whose GPU
    scales then apply. `engine_version` is the release measured (its memory-fraction
    default where it differs); `acceptance` the speculative per-token acceptance.
    `prepared`: `prepare` of the same config, GPU, model, longest_tokens, engine_version and
    kv_block_tokens, made once (the fit's), else made here.

    Raises:
        UsageError: an unknown harness, a config that does not fit in memory, or a
            max_model_len beyond the model's context.
        CapabilityError: expert or attention data parallelism asked of a dense model,
            or ep above the model's experts.
    """
    if harness not in HARNESSES:
        raise UsageError(f"unknown harness {harness!r}; use one of {', '.join(HARNESSES)}")
    perf_params = _engine_params(params, config)
    ready = prepared or prepare(config, gpu, model, longest_tokens=longest_tokens,
                                engine_version=engine_version, kv_block_tokens=kv_block_tokens)
    step, used = _step(ready.config, gpu, model, perf_params, acceptance, ready.memory)
    release = release_of(engine_version)
    engine = _serial_loop(HARNESSES[harness](used.engines[config.engine]), config.engine,
                          release)
    kernels = step.kernels
    return Resolved(
        config=ready.config, caps=ready.filled.caps,
        policy=policy_for(ready.config, release), memory=ready.memory,
        step=step, params=engine,
        coefficients=step_coefficients(step, engine),
        table=kernels.table() if kernels is not None else np.zeros(0),
        step_time=kernels.kind if kernels is not None else FALLBACK_KIND,
    )


def scheduler_replicas(config: EngineConfig, gpus: int | None) -> int:
    """Scheduler replicas (attention DP ranks, each a `Resolved`) over `gpus` GPUs, default
    one instance of tp × pp × dp.

    Raises:
        UsageError: gpus not a multiple of one instance.
    """
    per = config.gpus_per_instance
    gpus = gpus or per
    if gpus % per:
        raise UsageError(f"gpus={gpus} is not a multiple of one instance's tp x pp x dp = {per}")
    return gpus // per * config.dp


def _step(config: EngineConfig, gpu: GPU, model: ModelSpec, params: PerfParams,  # noqa: PLR0917
          acceptance: float | None, plan: MemoryPlan) -> tuple[Deployment, PerfParams]:
    """The step's deployment under the parameters' provider, and the parameters that apply:
    the fallback's fit where the provider does not cover the cell."""
    dep = deployment(config, gpu, model, acceptance=acceptance, scales=params.scales(gpu),
                     step_time=params.step_time, plan=plan)
    kind = dep.kernels.kind if dep.kernels is not None else FALLBACK_KIND
    used = params.for_kernels(kind)
    if used is not params:
        dep = deployment(config, gpu, model, acceptance=acceptance, scales=used.scales(gpu),
                         step_time=FALLBACK_KIND, plan=plan)
    return dep, used


__all__ = ["HARNESSES", "Harness", "Prepared", "Resolved", "prepare", "resolve",
           "scheduler_replicas"]
