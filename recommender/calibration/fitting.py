"""Fitting the performance model's parameters to measured rows: `fit`, the one fit procedure
(the rows are `recommender.calibration.cal_row.CalRow`, what the model answers for them
`recommender.calibration.answers`, the parameters fitted and their layout
`recommender.calibration.parameters`).

Shared by `recommender.calibration.calibrate` (the published CSV) and
`recommender.calibration.refit` (the user's own runs), which both import it and not each other.

The fit procedure (one; the history of the eight compared before is in
data/calibration/README.md): robust least squares (soft-L1, f_scale log 1.5: a source the
model lacks something for pulls the shared parameters less) on log(predicted / measured),
with a prior pulling log(param) towards the defaults, in two stages (one set shared by all
engines, then each engine from it), solved in the simulator's space by space mapping: the
steady-state algebra (`recommender.model.steady`, the same step formula in closed form) supplies
the Jacobian, the simulator the residuals. Round 0 fits the steady state on the rows it
describes (all but offline-burst latencies); each of SIM_ROUNDS rounds then simulates every
row at the current parameters exactly as `predict` answers it and refits the steady state
to the measurements corrected by simulator / steady state, so at the fixed point the
simulator (what users get), not the closed form, meets the measurements.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from scipy.optimize import least_squares

from core.errors import ServeFitError
from recommender.calibration.answers import (
    answerable,
    log_values,
    predict_row,
    run_key,
    simulate_rows,
)
from recommender.calibration.cal_row import LATENCY_METRICS, CalRow
from recommender.calibration.parameters import (
    FITTED,
    REFERENCE_ARCH,
    SCALES,
    Layout,
    arch_of,
    dependents,
    identified,
)
from recommender.model.params import PerfParams, default_params
from recommender.model.steptime import DEFAULT_KIND, FALLBACK_KIND

# Residual weight pulling log(param) towards its prior: stage 1 fits one parameter set shared
# by all engines (prior: the defaults); stage 2 fits each engine (prior: the shared set), so an
# engine with few rows stays near what all engines show instead of drifting.
PRIOR_WEIGHT = 0.1
LOSS, F_SCALE = "soft_l1", math.log(1.5)
SIM_ROUNDS = 2  # simulator corrections after the steady-state start
# Where each least_squares solve stops: the cost, the step and the gradient all relative
# (scipy's ftol, xtol, gtol). At scipy's default 1e-8 the solves crept along flat valleys:
# with Lambda held out, the measured tables' shared stage took 64 evaluations to a cost of
# 219.77 where 1e-4 stops after 21 at 221.59 (0.8 % higher), and its per-engine stage was
# still running after 12 minutes where 1e-4 took 7.5 s; that fold's whole fit took 7,003 s,
# and 296 s at 1e-4. The parameters mean something to a percent, the rows to tens of percent.
TOLERANCE = 1e-4
PROCEDURE = (f"least_squares on log(pred/measured), loss {LOSS} f_scale log 1.5, prior weight "
             f"{PRIOR_WEIGHT}, tolerance {TOLERANCE:g} (cost, step, gradient), shared then "
             f"per-engine stage, steady-state start on the rows "
             f"it describes, then {SIM_ROUNDS} simulator corrections over every row "
             "(space mapping: the simulator's answers are what is fitted); fitted per engine: "
             f"{', '.join(FITTED)}; per GPU architecture: {', '.join(SCALES)}")
# The parameter names are part of it: bands.json and fit.json from a model with other fitted
# parameters then fail the check that they come from this procedure (tests/.../test_bands.py).


def _transient(row: CalRow) -> bool:
    """A latency of an offline run (every request sent at once): its mean is set by how the
    burst drains (who waits behind whom), which the steady-state start cannot describe; the
    simulator rounds fit it."""
    return (row.concurrency is None and row.rate_rps is None
            and row.metric in LATENCY_METRICS)


def _jacobian(errs, rows: list[CalRow], layout: Layout, free: np.ndarray, *, weight: float,
              bounds: tuple[np.ndarray, np.ndarray]):
    """The residuals' Jacobian as least_squares' own 2-point differences (diff_step 1e-3,
    the step reversed at a bound) would compute it, evaluating for each entry only the rows
    that depend on it (`Layout.columns`): the other rows' differences are exactly zero, and
    pricing them made a fit on 3,000 rows take an hour."""
    size = len(free)
    deps = dependents(rows, layout, size)
    lo, hi = bounds
    cols = np.flatnonzero(free)

    def jac(x: np.ndarray) -> np.ndarray:
        f0 = errs(x, np.arange(len(rows)))
        out = np.zeros((len(rows) + size, len(cols)))
        for k, j in enumerate(cols):
            h = 1e-3 * (1.0 if x[j] >= 0 else -1.0) * max(1.0, abs(x[j]))
            if not lo[j] <= x[j] + h <= hi[j]:
                h = -h
            step = x.copy()
            step[j] += h
            h = step[j] - x[j]
            if len(deps[j]):
                out[deps[j], k] = (errs(step, deps[j]) - f0[deps[j]]) / h
            out[len(rows) + j, k] = weight
        return out

    return jac


def _solve(rows: list[CalRow], base: PerfParams, layout: Layout, prior: np.ndarray, *,
           weight: float, start: np.ndarray | None = None, by_family: bool = True,
           ) -> PerfParams:
    """least_squares on log(pred/measured) over `rows` + weight·(x − prior), from `start`
    (default: the prior). With `by_family`, only the parameters at least two publisher
    families identify (`identified`) move; the others keep their prior."""
    lo, hi = layout.bounds()
    x0 = np.clip(prior if start is None else start, lo + 1e-9, hi - 1e-9)
    fixed = np.clip(prior, lo + 1e-9, hi - 1e-9)
    free = identified(rows, base, layout, x0) if by_family else np.ones(len(x0), dtype=bool)
    if not free.any() and start is None:
        return base  # the prior is `base` itself: nothing to move
    if not free.any():
        return layout.params(base, fixed)

    def full(v: np.ndarray) -> np.ndarray:
        x = fixed.copy()
        x[free] = v
        return x

    keys = [run_key(r) for r in rows]
    measured = np.log([r.value for r in rows])

    def errs(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return log_values(rows, keys, idx, layout.params(base, x)) - measured[idx]

    def residuals(v: np.ndarray) -> np.ndarray:
        x = full(v)
        return np.concatenate([errs(x, np.arange(len(rows))), weight * (x - prior)])

    jac = _jacobian(errs, rows, layout, free, weight=weight, bounds=(lo, hi))
    result = least_squares(residuals, x0[free], jac=lambda v: jac(full(v)),
                           bounds=(lo[free], hi[free]), loss=LOSS, f_scale=F_SCALE,
                           ftol=TOLERANCE, xtol=TOLERANCE, gtol=TOLERANCE)
    return layout.params(base, full(result.x))


def _stages(rows: list[CalRow], base: PerfParams, *, weight: float, pooled: bool,
            by_family: bool) -> tuple[PerfParams, PerfParams]:
    """(stage 1, stage 2). Stage 1 (`pooled`): one set shared by the rows' engines +
    per-family GPU scales, prior `base`; stage 2: each engine's own set, prior stage 1."""
    engines = sorted({r.engine for r in rows})
    families = sorted({arch_of(r) for r in rows} - {REFERENCE_ARCH})
    if pooled:
        shared = Layout(engines, families, shared=True)
        base = _solve(rows, base, shared, shared.start(base), weight=weight,
                      by_family=by_family)
    own = Layout(engines, families)
    return base, _solve(rows, base, own, own.start(base), weight=weight, by_family=by_family)


def _correct(rows: list[CalRow], prior: PerfParams, fitted: PerfParams, *, weight: float,
             by_family: bool) -> PerfParams:
    """One simulator round: every row's measurement corrected by simulated / steady state at
    `fitted`, the per-engine stage refitted to them (prior `prior`, stage 1's result), warm
    from `fitted`."""
    simulated = simulate_rows(rows, fitted)
    targets = [t for r in rows if r.index in simulated
               and (t := _sim_corrected(r, simulated[r.index], fitted)) is not None]
    engines = sorted({r.engine for r in targets})
    families = sorted({arch_of(r) for r in targets} - {REFERENCE_ARCH})
    own = Layout(engines, families)
    return _solve(targets, prior, own, own.start(prior), weight=weight,
                  start=own.start(fitted), by_family=by_family)


def fit(rows: list[CalRow], base: PerfParams | None = None, *,
        step_time: str | None = None, weight: float = PRIOR_WEIGHT, pooled: bool = True,
        sim_rounds: int = SIM_ROUNDS, by_family: bool = True) -> PerfParams:
    """The fit procedure (module docstring) over `rows`, from `base` (default: the defaults
    of `step_time`, else of base's provider); returns parameters for that provider.

    Under a provider other than the fallback (the roofline), the fallback's parameters are
    fitted first (the same rows, the roofline's kernel times) and kept as
    `PerfParams.fallback`, which the rows the provider does not cover are predicted with.
    Engines and families without rows keep `base`; with `by_family` (published rows), so
    does every parameter fewer than two publisher families identify (`identified`); a refit
    to one user's own runs (one family by construction) passes False. Deterministic: fixed
    starts.
    """
    kind = step_time or (base.step_time if base is not None else DEFAULT_KIND)
    base = (base or default_params(kind)).model_copy(update={"step_time": kind})
    rows = [r for r in rows if answerable(r, base)]
    if kind != FALLBACK_KIND:
        start = base.fallback or base.model_copy(update={"fallback": None})
        fallback = fit(rows, start, step_time=FALLBACK_KIND, weight=weight, pooled=pooled,
                       sim_rounds=sim_rounds, by_family=by_family)
        base = base.model_copy(update={"fallback": fallback})
    steady_rows = [r for r in rows if not _transient(r)] or rows
    prior, fitted = _stages(steady_rows, base, weight=weight, pooled=pooled,
                            by_family=by_family)
    for _ in range(sim_rounds):
        fitted = _correct(rows, prior, fitted, weight=weight, by_family=by_family)
    return fitted


def _sim_corrected(row: CalRow, simulated: float, params: PerfParams) -> CalRow | None:
    """`row` with its value divided by `simulated` / steady-state at `params`; None when
    the steady state refuses the row (it then stays out of that round)."""
    try:
        ratio = simulated / predict_row(row, params)
    except ServeFitError:
        return None
    if not math.isfinite(ratio) or ratio <= 0:
        return None
    return replace(row, value=row.value / ratio)


__all__ = [
    "PRIOR_WEIGHT",
    "PROCEDURE",
    "SIM_ROUNDS",
    "fit",
]
