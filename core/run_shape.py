"""How a load is run, `RunShape` (`core.load.LoadSpec.run`), a plug-in keyed by `kind`: once
(`Single`), as one long steady load split into windows to see drift (`Soak`), as a closed loop
at doubling concurrencies (`Sweep`), or replayed at increasing compression until it breaks
(`Boundary`). What each shape needs of the rest of the load is checked by `LoadSpec`'s
validator, which knows the lengths and arrivals.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from core.records import Record

DEFAULT_STEP_FACTOR = 1.5
DEFAULT_MAX_STEPS = 8


class Single(Record):
    """The load run once."""

    kind: Literal["single"] = "single"


class Soak(Record):
    """A steady load (a Poisson rate or a concurrency) for the load's `duration_s`, split
    into windows of `window_s` (w0, w1, …) so drift over the run shows."""

    kind: Literal["soak"] = "soak"
    window_s: float = Field(gt=0, allow_inf_nan=False, description="Length of each window.")


class Sweep(Record):
    """The closed loop at its concurrency, then at twice it, four times, … up to
    `max_concurrency` (the run's caller stops once past the knee)."""

    kind: Literal["sweep"] = "sweep"
    max_concurrency: int = Field(ge=1, description="Highest concurrency level.")


class Boundary(Record):
    """A trace window's requests, or a Poisson load, replayed with its send offsets divided
    by step_factor^k for k = 0, 1, … up to max_steps (the caller stops at the first step that
    breaks)."""

    kind: Literal["boundary"] = "boundary"
    step_factor: float = Field(default=DEFAULT_STEP_FACTOR, gt=1, le=1000.0, allow_inf_nan=False,
                               description="Load multiplier from one step to the next.")
    max_steps: int = Field(default=DEFAULT_MAX_STEPS, ge=1, le=1000, description="Most steps run.")


RunShape = Annotated[Single | Soak | Sweep | Boundary, Field(discriminator="kind")]
