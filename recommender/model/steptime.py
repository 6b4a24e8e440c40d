"""Where one engine step's kernel time comes from: the step-time providers and their choice.

Owns the provider registry (`PROVIDERS`, kind → "module:factory", resolved lazily so a
provider's library is imported only when that provider is used), the record a provider is
asked about (`StepCell`: GPU, engine, model, tp / dp / ep, weight and KV formats), the
default provider (`DEFAULT_KIND`) and `kernels_for` (a provider's kernel model for a cell,
the roofline when the provider does not cover it). The provider is always an argument:
`PerfParams.step_time` names the one its parameters were fitted with, and
`recommender.model.resolve` passes it on; there is no ambient choice.

A provider answers the *kernel* time of one forward pass of the target model on the TP group
(`KernelModel`); the step formula (`perf`, evaluated in `kernel.step_time`) adds the engine's
fitted per-step and per-sequence overheads and the speculative draft on top, the same for
every provider. `measured`
(`recommender.model.steptime_aic`, the default) reads NVIDIA's measured per-operation tables
(aiconfigurator-core) where they cover the cell; the roofline (`perf.roofline_kernels`) is
the fallback everywhere else. No I/O here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from core.errors import UsageError
from engines.config import EngineKind
from recommender.catalog.specs import GPU, ModelSpec

if TYPE_CHECKING:  # the protocol perf's providers satisfy; perf imports this module
    import numpy as np


class KernelModel(Protocol):
    """One cell's kernel time: `table()` → one forward's kernel seconds (comm included,
    overheads and draft not) as a table the step formula reads (`kernel.step_time.table_seconds`),
    empty for the roofline's closed form."""

    @property
    def kind(self) -> str: ...

    def table(self) -> np.ndarray: ...


@dataclass(slots=True, frozen=True)
class StepCell:
    """What a provider needs to decide whether it covers a deployment and to build it."""

    engine: EngineKind
    gpu: GPU
    model: ModelSpec
    tp: int
    weights_format: str  # memory.MemoryPlan.weights_format: "bf16", "fp8", "nvfp4", ...
    kv_cache_dtype: str  # "bf16" or "fp8" (the KV format the plan holds)
    dp: int = 1  # attention data-parallel ranks (the table is one rank's step)
    ep: int = 1  # expert-parallel size


# kind → "module:factory"; factory(cell) → KernelModel, or None when it does not cover the
# cell. Lazy strings: no static import of a provider's library (CLI start-up stays light).
PROVIDERS: dict[str, str] = {
    "roofline": "recommender.model.perf:roofline_kernels",
    "measured": "recommender.model.steptime_aic:measured_kernels",
}
FALLBACK_KIND = "roofline"
# The cross-validated choice (bench/predict_accuracy.py --step-time roofline,measured,
# leave-one-source-out over 492 rows / 10 sources, fit procedure 'steady'): see
# data/calibration/bands.json for the per-cell figures. Measured tables cover 474 of the 492
# rows (Hopper, Blackwell and A100 with the three engines; MI300X and a few quantized cells
# fall back to the roofline).
DEFAULT_KIND = "measured"


def _check(kind: str) -> None:
    if kind not in PROVIDERS:
        raise UsageError(f"unknown step-time provider {kind!r}; use one of "
                         f"{', '.join(PROVIDERS)}")


def _factory(kind: str) -> Callable[[StepCell], KernelModel | None]:
    module, name = PROVIDERS[kind].split(":")
    return getattr(importlib.import_module(module), name)


def kernels_for(cell: StepCell, kind: str = DEFAULT_KIND) -> KernelModel:
    """The kernel model of provider `kind` for `cell`; the roofline's when that provider does
    not cover the cell (a missing table, an unknown GPU or model, or its library absent).

    Raises:
        UsageError: an unknown kind.
    """
    _check(kind)
    model = _factory(kind)(cell) or _factory(FALLBACK_KIND)(cell)
    assert model is not None  # the fallback covers every cell
    return model


def check_kind(kind: str) -> str:
    """`kind` when it names a provider.

    Raises:
        UsageError: an unknown kind.
    """
    _check(kind)
    return kind


__all__ = ["DEFAULT_KIND", "FALLBACK_KIND", "PROVIDERS", "KernelModel", "StepCell",
           "check_kind", "kernels_for"]
