"""The p10-p90 intervals a predicted figure carries: built from the held-out signed errors of
the publisher families measured (`predictive_interval`, what bands.json stores per interval
group), the groups a figure falls in (`interval_keys`, narrowest first), the group chosen for
it (`interval_for`, `intervals_of`: pooled with wider groups where a group has too few rows or
families, or the question lies outside the calibrated range) and draws of its error
(`draw_errors`). The file itself and a cell's median-APE band are
`recommender.calibration.bands_file`; the cells and regimes `recommender.calibration.cells`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from core.figures import Interval
from recommender.calibration.bands_file import BANDS_FILE, ProviderBands, SignedErrors, load_bands
from recommender.calibration.cells import Regime
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import release_key
from recommender.model.steptime import DEFAULT_KIND

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
