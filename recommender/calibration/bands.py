"""How far a prediction can be trusted: calibration cells and their cross-validated errors.

Owns the cell of a deployment and load (`cell_of`: engine × GPU family × dense/MoE × regime),
the bands file (data/calibration/bands.json: per step-time provider, each cell's
leave-one-source-out median APE and the held-out rows behind it, written by
`bench/predict_accuracy.py --write-bands`) and `band_for`, which turns a cell into
`core.figures.Band` for the step-time provider the prediction used, or None
outside every calibrated cell or for a provider the file has no errors for: the errors are
the provider's, so another provider's would be a band that was never measured.
No fitting here; the file is data.

A trace replay (what `recommend` simulates) is open-loop, and no published row measures an
open loop. `replay_regime` maps it to the closed-loop regime with the same mean number of
requests in the system (Little's law: L = throughput × mean E2E, per engine replica): the
cells' errors are the step-time model's at the batch sizes that load produces, and an open
loop at that occupancy runs the same batches. `cell_band` is `band_for` cached per cell, for
the search's thousands of candidates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError

from core.errors import CatalogError
from core.figures import Band, Interval
from core.load import ClosedLoop, Offline, Rate
from core.records import Record
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import release_key
from recommender.model.steptime import DEFAULT_KIND

BANDS_FILE = Path(__file__).resolve().parents[2] / "data" / "calibration" / "bands.json"
# Closed loop at this many users or fewer is "low batch": the step is weight-read bound and
# per-step overheads dominate, unlike the throughput-bound regimes above it.
LOW_BATCH_MAX_CONCURRENCY = 4

Regime = Literal["offline", "low_batch", "fixed_concurrency", "rate"]


def regime_of(arrival: ClosedLoop | Rate | Offline | None, concurrency: int | None = None,
              ) -> Regime:
    """The load regime: offline (max throughput), low batch (closed loop at ≤
    LOW_BATCH_MAX_CONCURRENCY users), fixed concurrency (closed loop above) or rate (open
    loop: MLPerf's Server scenario, `vllm bench serve --request-rate`). `arrival` None:
    closed loop at `concurrency`, offline when that is None too."""
    if isinstance(arrival, Offline):
        return "offline"
    if isinstance(arrival, ClosedLoop):
        concurrency = arrival.concurrency
    elif arrival is not None:
        return "rate"
    if concurrency is None:
        return "offline"
    return "low_batch" if concurrency <= LOW_BATCH_MAX_CONCURRENCY else "fixed_concurrency"


def cell_of(engine: str, gpu: GPU, model: ModelSpec, regime: Regime) -> str:
    """The calibration cell 'engine/gpu family/dense|moe/regime', e.g.
    'vllm/hopper/dense/low_batch'."""
    return f"{engine}/{gpu.architecture}/{'moe' if model.is_moe else 'dense'}/{regime}"


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


MIN_INTERVAL_ROWS = 20  # fewer held-out rows in a group: pool with the next wider one
# Fewer families in a group: no spread between publishers can be estimated there, so pool
# with the next wider one (two give one degree of freedom: a t quantile of 3.1 at p90).
MIN_INTERVAL_FAMILIES = 3
_T_GRID = 199  # quantiles of the between-family shift the interval integrates over
# The levels SignedErrors.quantiles are stored at: p5 to p95 in steps of 5.
QUANTILE_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))
_P10_P90_Z = 2 * 1.2815515655446004  # p90 - p10 of a standard normal


def predictive_interval(errors_by_family: Mapping[str, Sequence[float]]) -> SignedErrors:
    """The p10-p90 of the signed error a new publisher family should expect, from the
    held-out signed errors of the families measured.

    Held-out errors are a family's shift (its harness, client and builds) plus scatter
    within the family; a p10-p90 of the pooled rows covers the second only, and the largest
    family's at that (the last round's intervals held 57 % of unseen families' rows). So:
    each family's shift is its median error; a new family's shift is drawn from the shifts
    seen (their mean, and their spread × sqrt(1 + 1/F) with Student's t at F - 1 degrees of
    freedom: the prediction interval of one more draw); its scatter is the residuals about
    each family's median, every family weighted equally. The interval is the p10 and p90 of
    their sum. With one family there is no spread of shifts: its own p10-p90.
    """
    groups = [np.asarray(v, dtype=np.float64) for v in errors_by_family.values() if len(v)]
    if not groups:
        raise ValueError("no errors")
    rows, families = sum(len(g) for g in groups), len(groups)
    if families == 1:
        low, high = _weighted_quantiles(groups[0], np.ones(len(groups[0])), (0.1, 0.9))
        qs = _weighted_quantiles(groups[0], np.ones(len(groups[0])), QUANTILE_LEVELS)
        return SignedErrors(p10=low, p90=high, rows=rows, families=1, quantiles=qs)
    from scipy.stats import t as student_t  # import here: predict never needs it

    medians = np.array([float(np.median(g)) for g in groups])
    resid = np.concatenate([g - m for g, m in zip(groups, medians, strict=True)])
    weight = np.concatenate([np.full(len(g), 1.0 / len(g)) for g in groups])
    spread = float(np.std(medians, ddof=1)) * math.sqrt(1 + 1 / families)
    shifts = spread * student_t.ppf((np.arange(_T_GRID) + 0.5) / _T_GRID, df=families - 1)
    total = (resid[:, None] + shifts[None, :]).ravel()
    low, high = _weighted_quantiles(total, np.repeat(weight, _T_GRID), (0.1, 0.9))
    center = float(medians.mean())
    qs = _weighted_quantiles(total, np.repeat(weight, _T_GRID), QUANTILE_LEVELS)
    return SignedErrors(p10=center + low, p90=center + high, rows=rows, families=families,
                        quantiles=[center + q for q in qs])


def _weighted_quantiles(x: np.ndarray, w: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Quantiles of weighted samples, each at the middle of its weight (Hazen's rule: equal
    weights give numpy's method="hazen")."""
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order]
    at = (np.cumsum(ws) - 0.5 * ws) / ws.sum()
    return [float(v) for v in np.interp(qs, at, xs)]


def draw_errors(interval: Interval, rng: np.random.Generator, n: int, *,
                bands_file: str | Path = BANDS_FILE, step_time: str = DEFAULT_KIND
                ) -> np.ndarray:
    """`n` draws of log(measured / predicted) for a figure with `interval`: from its basis
    group's stored quantiles (inverse CDF, linear between QUANTILE_LEVELS, held at the end
    levels beyond them), else a normal with the interval's p10 and p90."""
    u = rng.uniform(0.0, 1.0, n)
    stored = _group_quantiles(interval.basis, str(bands_file), step_time)
    if stored:
        return np.interp(u, QUANTILE_LEVELS, stored)
    lo, hi = math.log(interval.low), math.log(interval.high)
    from scipy.stats import norm  # import here: predict never needs it

    return (lo + hi) / 2 + (hi - lo) / _P10_P90_Z * norm.ppf(u)


@lru_cache(maxsize=1024)
def _group_quantiles(basis: str, bands_file: str, step_time: str) -> tuple[float, ...]:
    if not Path(bands_file).exists():
        return ()
    errors = load_bands(bands_file).for_provider(step_time)
    found = None if errors is None else errors.intervals.get(basis)
    return () if found is None else tuple(found.quantiles)
# How far out the wider groups start when the question is outside the calibrated range
# (a release, an AMD GPU): past the engine's own cells.
OUTSIDE_LEVEL = 2


def interval_keys(engine: str, gpu: GPU, model: ModelSpec, regime: Regime, metric: str,
                  ) -> list[str]:
    """The interval groups of a figure, narrowest first: its cell and metric; the engine ×
    dense/MoE × regime; the regime; every row of the metric."""
    return _keys(engine, gpu.architecture, model.is_moe, regime, metric)


def _keys(engine: str, architecture: str, moe: bool, regime: str, metric: str) -> list[str]:
    kind = "moe" if moe else "dense"
    return [f"{engine}/{architecture}/{kind}/{regime}|{metric}",
            f"{engine}/{kind}/{regime}|{metric}", f"{regime}|{metric}", f"*|{metric}"]


def interval_for(keys: list[str], errors: dict[str, SignedErrors], *, start: int = 0,
                 ) -> tuple[str, SignedErrors] | None:
    """The first group from `keys[start:]` with at least MIN_INTERVAL_ROWS rows from
    MIN_INTERVAL_FAMILIES families, else the widest group if it has rows from that many
    families (nothing wider to pool with; the t spread of few families is wide already);
    None otherwise: a handful of one publisher's rows says nothing of another's (3 E2E rows
    of one family gave ×1.09-1.26, excluding the prediction itself), so such a figure has
    no interval rather than a narrow one."""
    present = [(k, errors[k]) for k in keys[start:] if k in errors]
    for key, err in present:
        if err.rows >= MIN_INTERVAL_ROWS and err.families >= MIN_INTERVAL_FAMILIES:
            return key, err
    if present and keys[-1] == present[-1][0] and present[-1][1].families >= (
            MIN_INTERVAL_FAMILIES):
        return present[-1]
    return None


def release_known(bands: ProviderBands, engine: str, version: str) -> bool:
    """Whether rows of `engine` at release `version` (major.minor) back the errors; True
    when the file lists no releases (then nothing can be said)."""
    if not bands.releases:
        return True
    return (release_key(version) or version) in bands.releases.get(engine, [])


INTERVAL_METRICS = ("throughput", "ttft", "tpot", "e2e")


def intervals_of(engine: str, gpu: GPU, model: ModelSpec, regime: str, *,
               bands_file: str | Path, step_time: str, engine_version: str | None,
               ) -> tuple[dict[str, Interval], list[str]]:
    """({metric group: interval}, [what the caller should know]): the p10-p90 a publisher
    family never seen should expect from the cell's leave-one-family-out signed errors
    (`predictive_interval`), pooled with wider cells where the cell has too few rows or
    families; an unmeasured release or an AMD GPU starts from the wider groups (never a
    narrower interval than the engine's own data give)."""
    return _intervals_cached(engine, (gpu.name, gpu.architecture, gpu.vendor), model.is_moe,
                             regime, bands_file=str(bands_file), step_time=step_time,
                             engine_version=engine_version)


def _by_number(releases: list[str]) -> list[str]:
    """Releases in release order (0.5 before 0.10), numbers compared as numbers."""
    return sorted(releases, key=lambda r: [int(x) if x.isdigit() else -1 for x in r.split(".")])


@lru_cache(maxsize=4096)
def _intervals_cached(engine: str, gpu: tuple[str, str, str], moe: bool, regime: str, *,
                      bands_file: str, step_time: str, engine_version: str | None,
                      ) -> tuple[dict[str, Interval], list[str]]:
    gpu_name, architecture, vendor = gpu
    if not Path(bands_file).exists():
        return {}, []
    errors = load_bands(bands_file).for_provider(step_time)
    if errors is None or not errors.intervals:
        return {}, []
    from engines.registry import ENGINES  # the plug-in's release is the default question

    said: list[str] = []
    release = engine_version or ENGINES[engine].defaults.engine_version
    outside = []
    if not release_known(errors, engine, release):
        outside.append(f"{engine} {release} was never measured (calibrated on "
                       f"{', '.join(_by_number(errors.releases.get(engine, []))) or 'no release'})")
    if vendor == "amd":
        outside.append(f"{gpu_name} is an AMD GPU: its ROCm kernels are priced by the "
                       "roofline, with few measurements behind them")
    start = OUTSIDE_LEVEL if outside else 0
    out: dict[str, Interval] = {}
    for metric in INTERVAL_METRICS:
        keys = _keys(engine, architecture, moe, regime, metric)
        found = interval_for(keys, errors.intervals, start=start)
        if found is None:
            continue
        key, err = found
        out[metric] = Interval(metric=metric, low=math.exp(err.p10), high=math.exp(err.p90),
                               basis=key, rows=err.rows, pooled=key != keys[0])
    if outside:
        said.append("outside the calibrated range: " + "; ".join(outside)
                    + ": intervals pooled from wider cells")
    pooled = sorted({i.basis for i in out.values() if i.pooled})
    if pooled and not outside:
        said.append(f"fewer than {MIN_INTERVAL_ROWS} held-out measurements from "
                    f"{MIN_INTERVAL_FAMILIES} publisher families in {keys[0].split('|')[0]}: "
                    f"intervals pooled from {', '.join(pooled)}")
    return out, said


def replay_regime(throughput_rps: float, mean_e2e_s: float | None) -> Regime:
    """The regime of an open-loop replay served at `throughput_rps` (completed requests/s of
    one engine replica) with mean E2E `mean_e2e_s`: the closed-loop regime at its mean number
    of requests in the system, L = throughput × E2E (Little's law), at least 1; "rate" (no
    calibrated cell) when nothing completed."""
    if mean_e2e_s is None or not math.isfinite(mean_e2e_s) or throughput_rps <= 0:
        return "rate"
    return regime_of(None, concurrency=max(1, round(throughput_rps * mean_e2e_s)))


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
