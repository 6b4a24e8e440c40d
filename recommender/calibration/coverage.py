"""What the calibration fit saw: the catalog models, GPUs, engines and input-length range of
the rows it used (`Coverage`).

`calibrate` writes it into fit.json's provenance (`coverage_of` over the rows it fitted);
`recommend`'s caveats read it back to say when a question reaches outside the calibrated
range. Written once at calibration time, so that a recommendation does not parse the
published-measurements CSV again (~0.5 s of a 2.6 s CLI `recommend` of the bundled sample).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from core.records import Record
from recommender.catalog.lookup import get_model

if TYPE_CHECKING:  # the row type only: its module imports the simulator
    from recommender.calibration.cal_row import CalRow


class Coverage(Record):
    """The calibrated range: what the fitted rows measured (names as the catalog has them)."""

    models: list[str] = Field(description="Catalog names of the models measured, sorted.")
    gpus: list[str] = Field(description="Catalog names of the GPUs measured, sorted.")
    engines: list[str] = Field(description="Engine kinds measured, sorted.")
    isl_min_tokens: int = Field(ge=0, description="Shortest measured input length.")
    isl_max_tokens: int = Field(ge=0, description="Longest measured input length.")


def coverage_of(rows: list[CalRow]) -> Coverage:
    """The coverage of the fitted rows (at least one).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no calibration rows: nothing is covered")
    return Coverage(models=sorted({get_model(r.model).name for r in rows}),
                    gpus=sorted({r.gpu for r in rows}), engines=sorted({r.engine for r in rows}),
                    isl_min_tokens=min(r.isl for r in rows),
                    isl_max_tokens=max(r.isl for r in rows))


__all__ = ["Coverage", "coverage_of"]
