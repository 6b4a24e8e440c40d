"""Fitting the performance model's parameters to measured rows: `CalRow` (one measurement,
the `predict` flags that state its deployment and load, and the request they make),
`simulate_row` (the answer users get for it), `fit` (the one fit procedure) and `errors`.

Shared by `recommender.calibration.calibrate` (the published CSV) and
`recommender.calibration.refit` (the user's own
runs), which both import it and not each other.

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
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError
from scipy.optimize import least_squares

from core.errors import ServeFitError, UsageError
from core.load import Dataset, DatasetLengths, LoadSpec, fixed
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.params import GpuScales, PerfParams, default_params
from recommender.model.perf import weight_quantization
from recommender.model.resolve import Harness, Prepared, prepare, resolve, scheduler_replicas
from recommender.model.steady import Prediction, steady_state
from recommender.model.steptime import DEFAULT_KIND, FALLBACK_KIND

if TYPE_CHECKING:  # sim.predict imports the simulator; only where used
    from recommender.sim.predict import PredictRequest

FITTED = ("compute_efficiency", "bandwidth_efficiency", "step_overhead_s", "per_seq_overhead_s",
          "request_overhead_s", "prefill_kernel_scale", "prefill_kernel_scale_tp8")
BOUNDS = {  # (low, high) of each fitted parameter
    "compute_efficiency": (0.05, 1.0),
    "bandwidth_efficiency": (0.05, 1.0),
    # 10 ms: past what any engine's per-step CPU work takes; with 50 ms the fit spent the
    # overhead on what it cannot explain (SGLang's held-out 4-user TPOT came out 8x too slow).
    "step_overhead_s": (1e-5, 0.01),
    "per_seq_overhead_s": (1e-8, 1e-3),
    "request_overhead_s": (1e-4, 0.5),
    # Measured tables only (the roofline ignores it): an engine release's prefill GEMMs from
    # twice as fast as the table's to three times as slow.
    "prefill_kernel_scale": (0.5, 3.0),
    "prefill_kernel_scale_tp8": (0.5, 3.0),
}
SCALES = ("compute_scale", "bandwidth_scale")
# A family's kernels reach at most the share of its datasheet peaks that Hopper's reach (the
# per-engine efficiencies are Hopper's); above 1 a scale would only absorb other errors.
SCALE_BOUNDS = (0.3, 1.0)
REFERENCE_ARCH = "hopper"  # GPU family whose datasheet peaks are taken as they are
# Residual weight pulling log(param) towards its prior: stage 1 fits one parameter set shared
# by all engines (prior: the defaults); stage 2 fits each engine (prior: the shared set), so an
# engine with few rows stays near what all engines show instead of drifting.
PRIOR_WEIGHT = 0.1
LOSS, F_SCALE = "soft_l1", math.log(1.5)
SIM_ROUNDS = 2  # simulator corrections after the steady-state start
PROCEDURE = (f"least_squares on log(pred/measured), loss {LOSS} f_scale log 1.5, prior weight "
             f"{PRIOR_WEIGHT}, shared then per-engine stage, steady-state start on the rows "
             f"it describes, then {SIM_ROUNDS} simulator corrections over every row "
             "(space mapping: the simulator's answers are what is fitted)")


@dataclass(slots=True, frozen=True)
class CalRow:
    """One usable measurement: the workload `predict` needs and the SI-normalised value."""

    index: int
    engine: str
    model: str
    gpu: str
    gpus: int
    tp: int
    precision: str
    kv_cache_dtype: str
    isl: int
    osl: int
    concurrency: int | None
    num_requests: int | None
    max_num_seqs: int | None
    gpu_memory_fraction: float | None
    metric: str
    value: float
    split: str  # "train" or "test"
    source: str = ""  # the publication (calibrate.source_key); leave-one-source-out groups by it
    family: str = ""  # who measured it with which harness (calibrate.family_of): LOFO's groups
    # Dataset whose length distribution the run drew from (core.load.DatasetLengths), None:
    # fixed lengths (or a spread not published, e.g. random-dataset outputs cut by EOS).
    dataset: Dataset | None = None
    # How the load reached the engine (`resolve.HARNESSES`): in_process for trtllm-bench and
    # vLLM's offline throughput / latency benchmarks (no API server between engine and client).
    harness: Harness = "served"
    engine_version: str | None = None  # the release measured, as the row states it
    dp: int = 1  # attention data-parallel ranks per instance
    ep: int = 1  # expert-parallel size
    max_batched_tokens: int | None = None
    # Poisson arrivals at this rate (MLPerf's Server scenario, `vllm bench serve
    # --request-rate R`): an open loop, neither closed-loop concurrency nor offline.
    rate_rps: float | None = None

    def engine_config(self, model: ModelSpec) -> EngineConfig:
        """The measured deployment as an `EngineConfig` of `model` (the row's model spec).

        Raises:
            UsageError: an unknown precision, or a field the config refuses.
        """
        try:
            return EngineConfig(
                engine=self.engine, model=model.name, tp=self.tp,  # type: ignore[arg-type]
                dp=self.dp, ep=self.ep, max_num_seqs=self.max_num_seqs,
                max_batched_tokens=self.max_batched_tokens,
                gpu_memory_fraction=self.gpu_memory_fraction,
                kv_cache_dtype=self.kv_cache_dtype,  # type: ignore[arg-type]
                weight_quantization=weight_quantization(self.precision))
        except ValidationError as exc:
            raise UsageError(f"row {self.index}: {exc.errors()[0]['msg']}") from None

    def load(self) -> LoadSpec:
        """The measured load: closed loop at the row's concurrency, or offline; the row's
        ISL/OSL as fixed lengths, or as the means of its dataset's distribution."""
        spec = fixed(self.isl, self.osl, concurrency=self.concurrency, rate_rps=self.rate_rps,
                     offline=self.concurrency is None and self.rate_rps is None,
                     num_requests=self.num_requests)
        if self.dataset is None:
            return spec
        lengths = DatasetLengths(dataset=self.dataset, input_tokens=self.isl,
                                 output_tokens=self.osl)
        return spec.model_copy(update={"lengths": lengths})

    def predict_argv(self) -> list[str]:
        """The `python -m app predict` flags that state this measurement: what a user types
        to ask the model the row's question (without --json)."""
        argv = ["--engine", self.engine, "--model", self.model, "--gpu", self.gpu,
                "--gpus", str(self.gpus), "--tp", str(self.tp), "--precision", self.precision,
                "--kv-cache-dtype", self.kv_cache_dtype, "--isl", str(self.isl),
                "--osl", str(self.osl), "--harness", self.harness.replace("_", "-")]
        argv += (["--concurrency", str(self.concurrency)] if self.concurrency is not None
                 else ["--rate", repr(self.rate_rps)] if self.rate_rps is not None
                 else ["--offline"])
        optional = {"--num-requests": self.num_requests, "--max-num-seqs": self.max_num_seqs,
                    "--max-batched-tokens": self.max_batched_tokens,
                    "--gpu-memory-fraction": self.gpu_memory_fraction,
                    "--engine-version": self.engine_version, "--lengths": self.dataset}
        if self.dp > 1:
            optional["--dp"] = self.dp
        if self.ep > 1:
            optional["--ep"] = self.ep
        for flag, value in optional.items():
            if value is not None:
                argv += [flag, str(value)]
        return argv

    def request(self, step_time: str = DEFAULT_KIND) -> PredictRequest:
        """The `predict` request `predict_argv` makes (tests check the CLI builds the same)."""
        from recommender.sim.predict import PredictRequest

        config = self.engine_config(get_model(self.model)).model_copy(
            update={"model": self.model})  # as typed: predict looks it up in the catalog
        return PredictRequest(config=config, gpu=self.gpu, model=self.model,
                              gpus=self.gpus, load=self.load(), harness=self.harness,
                              engine_version=self.engine_version, step_time=step_time)


LATENCY_METRICS = frozenset({"ttft_s", "tpot_s", "itl_s", "e2e_s"})


def _transient(row: CalRow) -> bool:
    """A latency of an offline run (every request sent at once): its mean is set by how the
    burst drains (who waits behind whom), which the steady-state start cannot describe; the
    simulator rounds fit it."""
    return (row.concurrency is None and row.rate_rps is None
            and row.metric in LATENCY_METRICS)


@dataclass(frozen=True, slots=True)
class _Question:
    """A row's deployment and load as the steady state prices them, made once per run (the
    fit prices each thousands of times, with other parameters only)."""

    model: ModelSpec
    gpu: GPU
    config: EngineConfig
    load: LoadSpec
    replicas: int
    prepared: Prepared


def _run_key(row: CalRow) -> CalRow:
    """The row without what one run's rows differ in (metric, value) or what names it: one
    key per question asked."""
    return replace(row, index=0, metric="", value=0.0, split="", source="", family="")


@lru_cache(maxsize=16384)
def _question(key: CalRow) -> _Question:
    model, gpu = get_model(key.model), get_gpu(key.gpu)
    config = key.engine_config(model)
    prepared = prepare(config, gpu, model, longest_tokens=key.isl + key.osl,
                       engine_version=key.engine_version)
    return _Question(model, gpu, config, key.load(), scheduler_replicas(config, key.gpus),
                     prepared)


def steady_prediction(row: CalRow, params: PerfParams) -> Prediction:
    """The steady-state algebra's answer for the row's run at `params`: the fit's Jacobian,
    the same step formula and resolved deployment as the simulator's.

    Raises:
        ServeFitError: the model refuses the row's deployment or load.
    """
    return _steady(_run_key(row), params)


def _steady(key: CalRow, params: PerfParams) -> Prediction:
    q = _question(key)
    res = resolve(q.config, q.gpu, q.model, params, longest_tokens=key.isl + key.osl,
                  harness=key.harness, engine_version=key.engine_version, prepared=q.prepared)
    return steady_state(res, q.load, replicas=q.replicas)


def predict_row(row: CalRow, params: PerfParams) -> float:
    """The steady-state value of `row.metric` (SI units, all GPUs)."""
    return float(getattr(steady_prediction(row, params), row.metric))


def _log_values(rows: list[CalRow], keys: list[CalRow], idx: np.ndarray,
                params: PerfParams) -> np.ndarray:
    """log of `predict_row` for rows[idx], one steady state per distinct run (`keys[i]` is
    `_run_key(rows[i])`)."""
    seen: dict[CalRow, Prediction] = {}
    out = np.empty(len(idx))
    for k, i in enumerate(idx):
        pred = seen.get(keys[i])
        if pred is None:
            pred = seen[keys[i]] = _steady(keys[i], params)
        out[k] = math.log(max(float(getattr(pred, rows[i].metric)), 1e-12))
    return out


def simulate_row(row: CalRow, params: PerfParams) -> float:
    """What `python -m app predict <row.predict_argv()>` answers for the row's metric (the
    same function, `recommender.sim.predict.predict`; latencies: the mean, as the rows report).

    Raises:
        ServeFitError: the simulator refuses the row's deployment or load.
    """
    from recommender.sim.predict import predict  # the simulator only where used

    return _metric(predict(row.request(params.step_time), params=params), row.metric)


def _metric(pred: Any, metric: str) -> float:
    value = getattr(pred, metric)
    return float(value.mean if metric in LATENCY_METRICS else value)


def predict_rows(rows: list[CalRow], params: PerfParams,
                 request_of: Callable[[CalRow], Any]) -> list[tuple[int, float | str]]:
    """[(row index, the predicted metric or the refusal's message)], sorted, one `predict`
    per distinct `request_of(row)`: a run's rows (its throughput, TTFT, TPOT... one CSV row
    each) ask the same question. `request_of` is the fit's `CalRow.request` or the bench's
    CLI parse; both must give the same request (tests/app/test_predict_calibrated_path.py)."""
    from recommender.sim.predict import predict  # the simulator only where used

    groups: dict[str, list[CalRow]] = {}
    requests = {}
    for r in rows:
        request = request_of(r)
        requests[key := request.model_dump_json()] = request
        groups.setdefault(key, []).append(r)
    out: list[tuple[int, float | str]] = []
    for key, members in groups.items():
        try:
            pred = predict(requests[key], params=params)
        except ServeFitError as exc:
            out += [(r.index, str(exc)) for r in members]
            continue
        out += [(r.index, _metric(pred, r.metric)) for r in members]
    return sorted(out)


def simulate_rows(rows: list[CalRow], params: PerfParams) -> dict[int, float]:
    """{row index: `simulate_row`} for the rows the simulator answers (refused ones are
    absent), one simulation per distinct question."""
    answers = predict_rows(rows, params, lambda r: r.request(params.step_time))
    return {i: v for i, v in answers if isinstance(v, float)}


@dataclass(slots=True, frozen=True)
class _Layout:
    """Where each fitted parameter sits in the optimiser's vector (all in log space)."""

    engines: list[str]  # one FITTED block each, or one shared block when `shared`
    families: list[str]  # one SCALES block each
    shared: bool = False

    def params(self, base: PerfParams, x: np.ndarray) -> PerfParams:
        new, values = dict(base.engines), np.exp(x)
        n = len(FITTED)
        for j, engine in enumerate(self.engines):
            block = values[:n] if self.shared else values[n * j : n * j + n]
            new[engine] = base.engines[engine].model_copy(  # type: ignore[index]
                update=dict(zip(FITTED, block, strict=True)))
        off = (1 if self.shared else len(self.engines)) * n
        fams = dict(base.gpu_families)
        for j, fam in enumerate(self.families):
            a, b = values[off + 2 * j : off + 2 * j + 2]
            fams[fam] = GpuScales(compute_scale=float(min(a, 1.0)),
                                  bandwidth_scale=float(min(b, 1.0)))
        return base.model_copy(update={"engines": new, "gpu_families": fams})

    def start(self, base: PerfParams) -> np.ndarray:
        if self.shared:
            eng = [float(np.exp(np.mean([np.log(getattr(base.engines[e], f))  # type: ignore[index]
                                         for e in self.engines]))) for f in FITTED]
        else:
            eng = [getattr(base.engines[e], f) for e in self.engines for f in FITTED]  # type: ignore[index]
        fam = [getattr(base.scales_for(a), f) for a in self.families for f in SCALES]
        return np.log(np.array(eng + fam, dtype=float))

    def columns(self, row: CalRow) -> list[int]:
        """The entries of x the row's prediction depends on: its engine's block (the shared
        block when `shared`) and its GPU architecture's scales; every other entry leaves it
        exactly unchanged (`params` writes them to other engines and architectures)."""
        n = len(FITTED)
        cols: list[int] = []
        if self.shared:
            cols += list(range(n))
        elif row.engine in self.engines:
            j = self.engines.index(row.engine)
            cols += list(range(n * j, n * j + n))
        arch = _arch(row)
        if arch in self.families:
            off = (1 if self.shared else len(self.engines)) * n + 2 * self.families.index(arch)
            cols += [off, off + 1]
        return cols

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        blocks = 1 if self.shared else len(self.engines)
        lo = [BOUNDS[f][0] for _ in range(blocks) for f in FITTED]
        hi = [BOUNDS[f][1] for _ in range(blocks) for f in FITTED]
        lo += [SCALE_BOUNDS[0]] * len(self.families) * len(SCALES)
        hi += [SCALE_BOUNDS[1]] * len(self.families) * len(SCALES)
        return np.log(lo), np.log(hi)


def _arch(row: CalRow) -> str:
    return get_gpu(row.gpu).architecture


MIN_IDENTIFYING_FAMILIES = 2  # a parameter fewer families move keeps its prior
IDENTIFY_STEP = 0.05  # log-step a parameter is moved by to see which rows it moves
IDENTIFY_TOL = 1e-4  # |change of a row's log error| that counts as moved


def identified(rows: list[CalRow], base: PerfParams, layout: _Layout, x: np.ndarray
               ) -> np.ndarray:
    """Which entries of `x` the rows of at least MIN_IDENTIFYING_FAMILIES publisher families
    move (a row is moved when its log prediction changes by more than IDENTIFY_TOL for a
    IDENTIFY_STEP log-step of the parameter). A parameter that one family alone identifies
    would carry that family's habits (its harness, client, builds) to everyone else."""
    keys = [_run_key(r) for r in rows]

    def logs(v: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return _log_values(rows, keys, idx, layout.params(base, v))

    families = np.array([r.family for r in rows])
    deps = _dependents(rows, layout, len(x))
    at = logs(x, np.arange(len(rows)))
    free = np.zeros(len(x), dtype=bool)
    for j in range(len(x)):
        step = x.copy()
        step[j] += IDENTIFY_STEP
        moved = deps[j][np.abs(logs(step, deps[j]) - at[deps[j]]) > IDENTIFY_TOL]
        free[j] = len(set(families[moved])) >= MIN_IDENTIFYING_FAMILIES
    return free


def _dependents(rows: list[CalRow], layout: _Layout, size: int) -> list[np.ndarray]:
    """Per entry of x, the indices of the rows whose prediction depends on it."""
    deps: list[list[int]] = [[] for _ in range(size)]
    for i, r in enumerate(rows):
        for j in layout.columns(r):
            deps[j].append(i)
    return [np.array(d, dtype=int) for d in deps]


def _jacobian(errs, rows: list[CalRow], layout: _Layout, free: np.ndarray, *, weight: float,
              bounds: tuple[np.ndarray, np.ndarray]):
    """The residuals' Jacobian as least_squares' own 2-point differences (diff_step 1e-3,
    the step reversed at a bound) would compute it, evaluating for each entry only the rows
    that depend on it (`_Layout.columns`): the other rows' differences are exactly zero, and
    pricing them made a fit on 3,000 rows take an hour."""
    size = len(free)
    deps = _dependents(rows, layout, size)
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


def _solve(rows: list[CalRow], base: PerfParams, layout: _Layout, prior: np.ndarray, *,
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

    keys = [_run_key(r) for r in rows]
    measured = np.log([r.value for r in rows])

    def errs(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return _log_values(rows, keys, idx, layout.params(base, x)) - measured[idx]

    def residuals(v: np.ndarray) -> np.ndarray:
        x = full(v)
        return np.concatenate([errs(x, np.arange(len(rows))), weight * (x - prior)])

    jac = _jacobian(errs, rows, layout, free, weight=weight, bounds=(lo, hi))
    result = least_squares(residuals, x0[free], jac=lambda v: jac(full(v)),
                           bounds=(lo[free], hi[free]), loss=LOSS, f_scale=F_SCALE)
    return layout.params(base, full(result.x))


def _stages(rows: list[CalRow], base: PerfParams, *, weight: float, pooled: bool,
            by_family: bool) -> tuple[PerfParams, PerfParams]:
    """(stage 1, stage 2). Stage 1 (`pooled`): one set shared by the rows' engines +
    per-family GPU scales, prior `base`; stage 2: each engine's own set, prior stage 1."""
    engines = sorted({r.engine for r in rows})
    families = sorted({_arch(r) for r in rows} - {REFERENCE_ARCH})
    if pooled:
        shared = _Layout(engines, families, shared=True)
        base = _solve(rows, base, shared, shared.start(base), weight=weight,
                      by_family=by_family)
    own = _Layout(engines, families)
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
    families = sorted({_arch(r) for r in targets} - {REFERENCE_ARCH})
    own = _Layout(engines, families)
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


def refusal(row: CalRow, params: PerfParams) -> str | None:
    """Why the model refuses the row's deployment (weights that leave its KV pool empty, a
    layout it cannot place), None when it answers: such a run says nothing about the
    fitted efficiencies and stays out of the fit; `predict` refuses it the same way (the
    bench counts it as refused)."""
    longest = get_model(row.model).max_context_tokens
    if row.isl + row.osl > longest:  # as predict refuses it (max_model_len)
        return f"a {row.isl}+{row.osl}-token request exceeds the model's {longest} positions"
    try:
        predict_row(row, params)
    except ServeFitError as exc:
        return str(exc)
    return None


def answerable(row: CalRow, params: PerfParams) -> bool:
    """Whether `refusal` finds nothing."""
    return refusal(row, params) is None


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


def errors(rows: list[CalRow], params: PerfParams) -> list[float]:
    """Absolute percentage error of each row as `predict` answers it, in %."""
    simulated = simulate_rows(rows, params)
    return [abs(simulated[r.index] / r.value - 1.0) * 100.0 if r.index in simulated
            else abs(simulate_row(r, params) / r.value - 1.0) * 100.0 for r in rows]


__all__ = [
    "BOUNDS",
    "FITTED",
    "MIN_IDENTIFYING_FAMILIES",
    "PRIOR_WEIGHT",
    "PROCEDURE",
    "SCALES",
    "SIM_ROUNDS",
    "CalRow",
    "answerable",
    "errors",
    "fit",
    "identified",
    "predict_row",
    "predict_rows",
    "refusal",
    "simulate_row",
    "simulate_rows",
    "steady_prediction",
]
