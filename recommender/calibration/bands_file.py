"""The bands file and a cell's band: data/calibration/bands.json (per step-time provider, each
cell's leave-one-source-out median APE and the held-out rows behind it, each interval group's
signed errors; written by `bench/predict_accuracy.py --write-bands`), its records, reading it
(`load_bands`) and `band_for`, which turns a cell into `core.figures.Band` for the step-time
provider the prediction used, or None outside every calibrated cell or for a provider the
file has no errors for: the errors are the provider's, so another provider's would be a band
that was never measured. `cell_band` is `band_for` cached per cell, for the search's
thousands of candidates. No fitting here; the file is data. The intervals built from and
read out of it are `recommender.calibration.bands`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import Field, ValidationError

from core.errors import CatalogError
from core.figures import Band
from core.records import Record
from recommender.model.steptime import DEFAULT_KIND

BANDS_FILE = Path(__file__).resolve().parents[2] / "data" / "calibration" / "bands.json"


class CellError(Record):
    """One cell's leave-one-source-out error."""

    median_ape: float = Field(ge=0, description="Median absolute relative error (0.15 = 15 %).")
    rows: int = Field(ge=1, description="Held-out measurements behind it.")


class SignedErrors(Record):
    """One interval group's p10-p90 of the signed error log(measured / predicted) a publisher
    family never seen should expect (`predictive_interval`)."""

    p10: float = Field(description="10th percentile of log(measured / predicted).")
    p90: float = Field(description="90th percentile of log(measured / predicted).")
    rows: int = Field(ge=1, description="Held-out measurements behind it.")
    families: int = Field(ge=1, description="Publisher families those rows come from.")
    quantiles: list[float] = Field(
        default_factory=list, description="The same distribution at QUANTILE_LEVELS (what "
        "a draw of the error is taken from: `draw_errors`); empty in files written before.")


class ProviderBands(Record):
    """One step-time provider's errors: overall and per cell, and the signed errors of every
    interval group (`interval_keys`)."""

    overall: CellError = Field(description="All held-out rows together.")
    cells: dict[str, CellError] = Field(description="Cell (`cell_of`) → its error.")
    intervals: dict[str, SignedErrors] = Field(
        default_factory=dict, description="Interval group (`interval_keys`) → its errors.")
    releases: dict[str, list[str]] = Field(
        default_factory=dict, description="Engine → the releases (major.minor) its rows ran.")


class BandsFile(Record):
    """data/calibration/bands.json. The top-level `overall`/`cells` are the default
    provider's (`steptime.DEFAULT_KIND`; a schema-1 file has only those); `providers` holds
    every provider the bench measured, keyed by kind."""

    schema_version: int = 1
    method: str = Field(description="How the errors were measured.")
    csv_sha256: str = Field(description="The calibration CSV the errors come from.")
    fit_procedure: str | None = Field(default=None, description="fitting.PROCEDURES key the "
                                      "folds were fitted with.")
    overall: CellError = Field(description="All held-out rows together (default provider).")
    cells: dict[str, CellError] = Field(description="Cell (`cell_of`) → its error (default "
                                        "provider).")
    providers: dict[str, ProviderBands] = Field(
        default_factory=dict, description="Step-time provider kind → its errors.")

    def for_provider(self, kind: str) -> ProviderBands | None:
        """The errors measured with step-time provider `kind`, None when it was not run."""
        if kind in self.providers:
            return self.providers[kind]
        if not self.providers and kind == DEFAULT_KIND:  # schema 1: the default's only
            return ProviderBands(overall=self.overall, cells=self.cells)
        return None


@lru_cache(maxsize=4)
def load_bands(path: str | Path = BANDS_FILE) -> BandsFile:
    """The bands file (cached per path; it only changes when the bench rewrites it).

    Raises:
        CatalogError: the file is missing or malformed (data the tool ships, not the
            question: no search may take it for one candidate's failure).
    """
    try:
        return BandsFile.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise CatalogError(f"{path}: cannot load error bands ({exc.error_count()} errors, "
                           f"first {where}: {first['msg']}); regenerate with "
                           "`python bench/predict_accuracy.py --write-bands`") from None
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path}: cannot load error bands ({exc}); regenerate with "
                           "`python bench/predict_accuracy.py --write-bands`") from None


def band_for(cell: str, bands: BandsFile | None = None, kind: str | None = None,
             ) -> Band | None:
    """The cell's band under step-time provider `kind` (default `steptime.DEFAULT_KIND`),
    or None when no held-out measurement falls in it or the file
    has no errors for that provider."""
    bands = bands or load_bands()
    errors = bands.for_provider(kind or DEFAULT_KIND)
    found = errors.cells.get(cell) if errors is not None else None
    if found is None:
        return None
    return Band(cell=cell, median_ape=found.median_ape, rows=found.rows)


def band_of_prediction(
    cell: str, path: str | Path = BANDS_FILE, kind: str | None = None,
) -> tuple[Band | None, str | None]:
    """(the cell's band under step-time provider `kind` (default the default provider), None) or,
    outside every calibrated cell, for a provider without bands or without a bands file,
    (None, the warning that says so plainly)."""
    kind = kind or DEFAULT_KIND
    if not Path(path).exists():
        return None, (f"no error bands ({Path(path).name} missing): how far this prediction "
                      "can be trusted is unknown")
    bands = load_bands(path)
    if bands.for_provider(kind) is None:
        return None, (f"no error bands for step-time provider {kind!r} (measured for "
                      f"{', '.join(bands.providers) or DEFAULT_KIND} only): how far this "
                      "prediction can be trusted is unknown")
    band = band_for(cell, bands, kind)
    if band is None:
        return None, (f"outside every calibrated cell: no published measurement backs {cell}, "
                      "so this prediction has no error band (its error is unknown)")
    return band, None


def cell_band(cell: str, path: str | Path = BANDS_FILE, kind: str | None = None,
              ) -> Band | None:
    """`band_for(cell)` under step-time provider `kind` (default the default provider) from the
    bands file at `path`, cached per (cell, path, kind); None outside every calibrated cell,
    for a provider without bands or without a bands file (`band_of_prediction` says which).

    Raises:
        CatalogError: the bands file exists but is malformed.
    """
    return _cell_band(cell, str(path), kind or DEFAULT_KIND)


@lru_cache(maxsize=1024)
def _cell_band(cell: str, path: str, kind: str) -> Band | None:
    return band_of_prediction(cell, path, kind)[0]
