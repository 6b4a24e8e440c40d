"""The performance model's fitted parameters: per-engine factors, per-GPU-family scales, I/O.

Owns the `PerfParams` record (what data/calibration/fit.json's `params` key holds, and per
step-time provider its `params_by_step_time`, written by `recommender.calibration.calibrate`), its
defaults (the optimiser's starting point) and `load_params`. The step formula that uses
them is `recommender.model.perf`'s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pydantic import Field, ValidationError

from core.errors import UsageError, first_problem
from core.records import Record
from engines.config import EngineKind
from recommender.catalog.specs import GPU
from recommender.model.steptime import DEFAULT_KIND, FALLBACK_KIND, check_kind

FIT_FILE = Path(__file__).resolve().parents[2] / "data" / "calibration" / "fit.json"


class EngineParams(Record):
    """Per-engine efficiency factors and overheads (fitted; defaults = optimiser start)."""

    compute_efficiency: float = Field(
        default=0.5, gt=0, le=1, description="Achieved share of the GPU's dense TFLOP/s."
    )
    bandwidth_efficiency: float = Field(
        default=0.75, gt=0, le=1, description="Achieved share of peak HBM bandwidth."
    )
    step_overhead_s: float = Field(
        default=0.002, ge=0, description="Framework time per engine step (scheduling, launch)."
    )
    per_seq_overhead_s: float = Field(
        default=5e-6,
        ge=0,
        description="Framework time per sampled position per step (one per running "
        "sequence; k + 1 per sequence under speculative decoding).",
    )
    serial_loop_seq_s: float = Field(
        default=4e-5,
        ge=0,
        description="Releases whose engine loop does its host work between steps "
        "(EnginePlugin.serial_host_loop: vLLM's V0 engine, before 0.8): host time per "
        "running sequence per step (scheduling, input preparation, output processing), "
        "in-process and served alike; added to per_seq_overhead_s for those releases.",
    )
    interconnect_efficiency: float = Field(
        default=0.7, gt=0, le=1, description="Achieved share of one-way GPU-GPU bandwidth."
    )
    allreduce_latency_s: float = Field(
        default=10e-6, ge=0, description="Fixed latency of one TP all-reduce."
    )
    prefill_kernel_scale: float = Field(
        default=1.0,
        gt=0,
        description="Measured step-time provider only: the engine release's prefill GEMM/MoE "
        "time over the table's (the tables are one release of each engine) on one GPU. "
        "Multiplies the prefill tokens' share of the table's non-attention time; the "
        "roofline's compute_efficiency plays this part there.",
    )
    prefill_kernel_scale_tp8: float = Field(
        default=1.0,
        gt=0,
        description="prefill_kernel_scale at tensor parallelism 8 (and above); between 1 and "
        "8 GPUs the scale is interpolated geometrically in log2(tp) (`prefill_scale`). The "
        "published single-GPU runs prefilled at about half the tables' speed, the 4- and "
        "8-GPU runs at about theirs.",
    )
    request_overhead_s: float = Field(
        default=0.0,
        ge=0,
        description="Client-visible time per request outside the engine's steps (HTTP, "
        "tokenisation, chat template, detokenisation): added to TTFT and E2E; in a closed "
        "loop a user's next request enters the engine this much later (after the "
        "closed-loop gap).",
    )
    closed_loop_gap_s: float = Field(
        default=0.0,
        ge=0,
        description="Closed loop only: time between one request's last token reaching the "
        "user and that user's next request being sent (the client's turnaround: closing "
        "the stream, recording, building the next request). Counted in neither TTFT nor "
        "TPOT; it lowers a closed loop's request rate when every user fits the batch. "
        "Apart from request_overhead_s, so a light-load TTFT does not pay for it. Not "
        "fitted (a fit file may set it): fitted, it left the held-out errors as they were "
        "(data/calibration/README.md).",
    )

    def prefill_scale(self, tp: int) -> float:
        """The prefill kernel scale at `tp` GPUs: prefill_kernel_scale at 1,
        prefill_kernel_scale_tp8 at 8 and above, geometric in log2(tp) between."""
        x = min(math.log2(max(tp, 1)) / 3.0, 1.0)
        return self.prefill_kernel_scale ** (1.0 - x) * self.prefill_kernel_scale_tp8 ** x


class GpuScales(Record):
    """Per-GPU-architecture corrections of the datasheet peaks (fitted; 1 = as published).

    Absorbs what one architecture's kernels reach that the per-engine efficiencies do not
    (e.g. FP4 paths on Blackwell, Ampere's older kernels); Hopper is the reference (1, 1).
    """

    compute_scale: float = Field(default=1.0, gt=0, description="Multiplies peak FLOP/s.")
    bandwidth_scale: float = Field(default=1.0, gt=0, description="Multiplies peak HBM B/s.")


class PerfParams(Record):
    """All engines' parameters, plus where they came from (the fit file's `params`)."""

    engines: dict[EngineKind, EngineParams] = Field(description="Parameters per engine kind.")
    gpu_families: dict[str, GpuScales] = Field(
        default_factory=dict,
        description="Corrections per GPU architecture (GPU.architecture); absent = (1, 1).",
    )
    step_time: str = Field(
        default=DEFAULT_KIND,
        description="The step-time provider (`steptime.PROVIDERS`) these parameters were "
        "fitted beside: deployments are priced with its kernel times.",
    )
    fallback: PerfParams | None = Field(
        default=None,
        description="For a step-time provider other than the fallback (the roofline): the "
        "fallback's own fit, which deployments the provider does not cover run on (their "
        "kernel time is the roofline's, so its efficiencies and overheads apply). None: these "
        "parameters serve every deployment.",
    )

    def for_kernels(self, kind: str | None) -> PerfParams:
        """The parameters for a deployment whose kernel time comes from provider `kind`: the
        fallback's fit when the deployment fell back to it, else these."""
        if self.fallback is not None and kind == FALLBACK_KIND:
            return self.fallback
        return self

    def scales(self, gpu: GPU) -> GpuScales:
        """The GPU's architecture's corrections, (1, 1) when none was fitted."""
        return self.scales_for(gpu.architecture)

    def scales_for(self, architecture: str) -> GpuScales:
        """An architecture's corrections, (1, 1) when none was fitted."""
        return self.gpu_families.get(architecture, GpuScales())


def default_params(step_time: str = DEFAULT_KIND) -> PerfParams:
    """Starting point of the fit for step-time provider `step_time`. 10 ms of per-request
    API time is a starting guess (a local HTTP round trip plus tokenisation of a short
    prompt)."""
    start = EngineParams(request_overhead_s=0.01)
    return PerfParams(engines={"vllm": start, "sglang": start, "trtllm": start},
                      step_time=check_kind(step_time))


def load_params(path: str | Path = FIT_FILE, step_time: str = DEFAULT_KIND) -> PerfParams:
    """The fitted parameters from fit.json for step-time provider `step_time`: its entry of
    `params_by_step_time` (each provider's
    efficiencies and overheads are fitted with that provider's kernel times), else `params`
    (a refit of the user's own runs, written for one provider); with the fallback
    provider's entry as `fallback` for the deployments the provider does not cover.

    Raises:
        UsageError: the file is missing or does not hold a valid `params` record.
    """
    kind = check_kind(step_time)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object at the top level")
        by_kind = data.get("params_by_step_time") or {}
        params = PerfParams.model_validate(
            {**(by_kind.get(kind) or data["params"]), "step_time": kind})
        if kind != FALLBACK_KIND and FALLBACK_KIND in by_kind and params.fallback is None:
            fallback = PerfParams.model_validate(
                {**by_kind[FALLBACK_KIND], "step_time": FALLBACK_KIND})
            params = params.model_copy(update={"fallback": fallback})
        return params
    except RecursionError:  # `[[[[…` a hundred thousand deep: no fit file is that deep
        raise UsageError(f"{path}: cannot load performance-model parameters (JSON nested "
                         "too deeply)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{path}: cannot load performance-model parameters ({_first_line(exc)}); "
            "regenerate with `python -m recommender.calibration.calibrate`"
        ) from None


def _first_line(exc: Exception) -> str:
    """One line for the user: a validation error's first problem (pydantic lists every field
    over many lines), else the exception's text."""
    if isinstance(exc, ValidationError):
        where, message = first_problem(exc)
        return f"{where}: {message}" if where else message
    text = str(exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__
