"""What the model answers for a calibration row: the steady-state algebra's answer
(`steady_prediction`, `predict_row`: the fit's Jacobian, priced once per distinct run), what
`predict` answers through the simulator (`simulate_row`, `predict_rows`: what users get), which
rows the model refuses (`refusal`) and each row's error (`errors`). The fit that uses these
answers is `recommender.calibration.fitting`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from core.errors import ServeFitError
from core.load import LoadSpec
from engines.config import EngineConfig
from recommender.calibration.cal_row import LATENCY_METRICS, CalRow
from recommender.catalog.lookup import get_gpu, get_model
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.params import PerfParams
from recommender.model.resolve import Prepared, prepare, resolve, scheduler_replicas
from recommender.model.steady import Prediction, steady_state


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


def run_key(row: CalRow) -> CalRow:
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
    return _steady(run_key(row), params)


def _steady(key: CalRow, params: PerfParams) -> Prediction:
    q = _question(key)
    res = resolve(q.config, q.gpu, q.model, params, longest_tokens=key.isl + key.osl,
                  harness=key.harness, engine_version=key.engine_version, prepared=q.prepared)
    return steady_state(res, q.load, replicas=q.replicas)


def predict_row(row: CalRow, params: PerfParams) -> float:
    """The steady-state value of `row.metric` (SI units, all GPUs)."""
    return float(getattr(steady_prediction(row, params), row.metric))


def log_values(rows: list[CalRow], keys: list[CalRow], idx: np.ndarray,
                params: PerfParams) -> np.ndarray:
    """log of `predict_row` for rows[idx], one steady state per distinct run (`keys[i]` is
    `run_key(rows[i])`)."""
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


def errors(rows: list[CalRow], params: PerfParams) -> list[float]:
    """Absolute percentage error of each row as `predict` answers it, in %."""
    simulated = simulate_rows(rows, params)
    return [abs(simulated[r.index] / r.value - 1.0) * 100.0 if r.index in simulated
            else abs(simulate_row(r, params) / r.value - 1.0) * 100.0 for r in rows]
