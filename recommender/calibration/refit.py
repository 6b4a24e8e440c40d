"""Refit the performance model to the user's own measured runs, the published fit as prior.

Owns reading a measured-runs file (CSV or JSON Lines: one measurement a row, columns
`engine, model, gpu, tp, isl, osl, concurrency | num_requests, metric, value`, optional
`gpus, precision, kv_cache_dtype, max_num_seqs, gpu_memory_fraction`), the refit
(`fitting.fit` from the published parameters, pulled towards them with MEASURED_PRIOR_WEIGHT,
per engine, no pooling) and its report: how far each parameter moved and the error before and
after. Run `python -m recommender.calibration.calibrate --measured RUNS.csv [--out FIT.json]`.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, ValidationError

from core.atomic import write_atomic
from core.errors import UsageError
from core.records import Record
from recommender.calibration.answers import errors
from recommender.calibration.cal_row import CalRow
from recommender.calibration.fitting import fit
from recommender.calibration.parameters import SCALES
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.params import FIT_FILE, PerfParams, load_params

# Stronger than the published fit's own prior: a handful of the user's runs should correct
# the parameters they inform without dragging the others far from what 130 published rows say.
MEASURED_PRIOR_WEIGHT = 0.3
# Metric names accepted → (CalRow metric in SI, factor to SI).
METRICS: dict[str, tuple[str, float]] = {
    "output_throughput_tok_s": ("output_throughput_tok_s", 1.0),
    "total_throughput_tok_s": ("total_throughput_tok_s", 1.0),
    "request_throughput_rps": ("request_throughput_rps", 1.0),
    **{f"{m}_s": (f"{m}_s", 1.0) for m in ("ttft", "tpot", "itl", "e2e")},
    **{f"{m}_ms": (f"{m}_s", 1e-3) for m in ("ttft", "tpot", "itl", "e2e")},
}


class MeasuredRun(Record):
    """One measured figure of one fixed-length run on the user's hardware."""

    engine: Literal["vllm", "sglang", "trtllm"]
    model: str
    gpu: str
    tp: int = Field(ge=1)
    gpus: int | None = Field(default=None, ge=1)
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    num_requests: int | None = Field(default=None, ge=1, description="offline run size")
    precision: str = "bf16"
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    metric: str
    value: float = Field(gt=0)


def _records(path: Path) -> list[dict]:
    try:
        if path.suffix in {".jsonl", ".ndjson"}:
            lines = path.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line.strip()]
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read measured runs ({exc})") from exc
    frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_dict("records")


def read_measured(path: str | Path) -> list[CalRow]:
    """The measured runs as CalRows (split "measured").

    Raises:
        UsageError: unreadable file, or a row with a bad field (row number and field named).
    """
    path = Path(path)
    rows = []
    for i, rec in enumerate(_records(path), start=1):
        try:
            run = MeasuredRun.model_validate({k: v for k, v in rec.items() if v is not None})
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise UsageError(f"{path}: row {i}, {field}: {err['msg']}") from exc
        if (run.concurrency is None) == (run.num_requests is None):
            raise UsageError(f"{path}: row {i}: give exactly one of concurrency, num_requests")
        if run.metric not in METRICS:
            raise UsageError(f"{path}: row {i}: metric {run.metric!r} is not one of "
                             f"{', '.join(METRICS)}")
        metric, factor = METRICS[run.metric]
        rows.append(CalRow(
            index=i, engine=run.engine, model=get_model(run.model).name,
            gpu=get_gpu(run.gpu).name, gpus=run.gpus or run.tp, tp=run.tp,
            precision=run.precision, kv_cache_dtype=run.kv_cache_dtype, isl=run.isl,
            osl=run.osl, concurrency=run.concurrency, num_requests=run.num_requests,
            max_num_seqs=run.max_num_seqs, gpu_memory_fraction=run.gpu_memory_fraction,
            metric=metric, value=run.value * factor, split="measured",
        ))
    if not rows:
        raise UsageError(f"{path}: no measured runs")
    return rows


def _flat(params: PerfParams) -> dict[str, float]:
    out = {f"{e}.{k}": float(v) for e, p in params.engines.items()
           for k, v in p.model_dump().items()}
    for fam, s in params.gpu_families.items():
        out |= {f"{fam}.{k}": float(getattr(s, k)) for k in SCALES}
    return out


def refit_measured(
    measured: str | Path, out: str | Path, base_path: str | Path = FIT_FILE
) -> dict:
    """Refit `base_path`'s parameters to the runs in `measured`; write `out` (atomically).

    Returns the record written: params, the parameters that moved (before, after, ratio),
    and the median / max APE over the measured rows before and after (in-sample: the same
    rows inform and score the refit).

    Raises:
        UsageError: unreadable inputs, or rows the model cannot predict (e.g. do not fit).
    """
    rows = read_measured(measured)
    base = load_params(base_path)
    before_err = errors(rows, base)
    params = fit(rows, base, weight=MEASURED_PRIOR_WEIGHT, pooled=False, by_family=False)
    after_err = errors(rows, params)
    old, new = _flat(base), _flat(params)
    moved = {k: {"before": old.get(k, 1.0), "after": v, "ratio": v / old.get(k, 1.0)}
             for k, v in new.items()
             if not math.isclose(v, old.get(k, 1.0), rel_tol=1e-6)}
    record = {
        "schema_version": 1,
        "provenance": {
            "base_fit": str(Path(base_path).name),
            "base_fit_sha256": hashlib.sha256(Path(base_path).read_bytes()).hexdigest(),
            "measured": str(Path(measured).name),
            "measured_sha256": hashlib.sha256(Path(measured).read_bytes()).hexdigest(),
            "rows": len(rows),
            "objective": f"calibrate.fit from the base fit, prior weight {MEASURED_PRIOR_WEIGHT}"
            " x log(param/base), per engine present in the measured rows",
        },
        "params": json.loads(params.model_dump_json()),
        "moved": moved,
        "errors": {
            "before": {"median_ape_pct": float(np.median(before_err)),
                       "max_ape_pct": float(np.max(before_err))},
            "after": {"median_ape_pct": float(np.median(after_err)),
                      "max_ape_pct": float(np.max(after_err))},
        },
    }
    write_atomic(out, json.dumps(record, indent=2) + "\n")
    return record


def report(record: dict) -> str:
    """The refit's summary for the terminal."""
    e = record["errors"]
    lines = [f"{record['provenance']['rows']} measured rows; median APE "
             f"{e['before']['median_ape_pct']:.1f} % -> {e['after']['median_ape_pct']:.1f} %, "
             f"max {e['before']['max_ape_pct']:.1f} % -> {e['after']['max_ape_pct']:.1f} %"]
    for key, m in sorted(record["moved"].items(), key=lambda kv: -abs(math.log(kv[1]["ratio"]))):
        lines.append(f"  {key:40s} {m['before']:.4g} -> {m['after']:.4g} (x{m['ratio']:.3f})")
    return "\n".join(lines)
