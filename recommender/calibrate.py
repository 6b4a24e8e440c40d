"""Fit the performance model's per-engine parameters to published measurements.

Parses `data/calibration/published_calibration.csv` (a copy of the shared benchmark set) into
typed rows (names mapped onto the catalog, metrics normalised to seconds / per-second over
all GPUs), splits them by a stated hash rule, fits `PerfParams` with least squares on log
relative error over the train rows, and writes data/calibration/fit.json with provenance.
Run `python -m recommender.calibrate`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from core.errors import ServeFitError, UsageError
from recommender.catalog import get_gpu, get_model
from recommender.perf import (
    FIT_FILE,
    EngineParams,
    GpuScales,
    PerfParams,
    default_params,
    predict,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CSV = REPO / "data" / "calibration" / "published_calibration.csv"
TEST_RULE = (
    "test iff int(sha256(setup)[:8], 16) % 4 == 0, setup = source|engine|model|gpu|num_gpus|"
    "tp|precision|isl|osl|dataset|concurrency|notes (all metrics of one run stay together)"
)
FITTED = ("compute_efficiency", "bandwidth_efficiency", "step_overhead_s", "per_seq_overhead_s",
          "request_overhead_s")
BOUNDS = {  # (low, high) of each fitted parameter
    "compute_efficiency": (0.05, 1.0),
    "bandwidth_efficiency": (0.05, 1.0),
    "step_overhead_s": (1e-5, 0.05),
    "per_seq_overhead_s": (1e-8, 1e-3),
    "request_overhead_s": (1e-4, 0.5),
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

# CSV engine → engine kind. NIM's engine is not stated; NIM 1.8 serves Llama-3.3-70B FP8 on
# H100 with its TensorRT-LLM profile, so its rows count as trtllm (an assumption, reported).
ENGINE_NAMES = {
    "tensorrt-llm": "trtllm",
    "vllm": "vllm",
    "vllm (ROCm build)": "vllm",
    "sglang": "sglang",
    "nim (backend engine not stated in excerpt)": "trtllm",
}
# CSV GPU → catalog name. "H100 80GB" / "H100" are taken as SXM (NIM and SGLang benchmark on
# SXM systems). The GPUStack A100's memory is not stated: a 40 GB card cannot hold Qwen3-14B
# bf16 (29.6 GB) plus one 32K-token sequence, which those rows serve, so it is the 80 GB.
GPU_NAMES = {
    "H200 SXM 141GB": "H200",
    "H100 SXM 80GB": "H100-SXM",
    "H100 80GB": "H100-SXM",
    "H100": "H100-SXM",
    "B200 180GB": "B200",
    "MI300X 192GB": "MI300X",
    "A100 80GB": "A100-80GB",
    "A100 (40/80GB variant not stated)": "A100-80GB",
}
# CSV precision → (predict precision, kv_cache_dtype). Rows whose notes name ModelOpt
# checkpoints (trtllm-bench) get an FP8 KV cache (kv_cache_quant_algo FP8; assumed).
PRECISIONS = {
    "BF16": ("bf16", "auto"),
    "FP8": ("fp8", "auto"),
    "FP8 weights + FP8 KV": ("fp8", "fp8"),
    "FP4 (NVFP4)": ("nvfp4", "auto"),
    "FP8 checkpoint on A100 (no FP8 tensor cores; weight-only path)": ("fp8", "auto"),
    "AWQ int4": ("awq", "auto"),
}
# (CSV metric, unit) → (Prediction field, factor to SI).
METRICS = {
    ("total_output_throughput", "output tokens/s (all GPUs)"): ("output_throughput_tok_s", 1.0),
    ("output_throughput", "output tokens/s"): ("output_throughput_tok_s", 1.0),
    ("throughput", "tokens/s"): ("output_throughput_tok_s", 1.0),  # AIPerf: "likely output"
    ("total_token_throughput", "tokens/s (in+out)"): ("total_throughput_tok_s", 1.0),
    ("request_throughput", "req/s"): ("request_throughput_rps", 1.0),
    ("mean_ttft", "ms"): ("ttft_s", 1e-3),
    ("mean_tpot", "ms"): ("tpot_s", 1e-3),
    ("mean_itl", "ms"): ("itl_s", 1e-3),
    ("end_to_end_batch_latency", "s"): ("e2e_s", 1.0),
}


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


def _split(raw: pd.Series) -> str:
    keys = ("source engine model gpu num_gpus tp precision isl osl dataset concurrency notes")
    setup = "|".join(str(raw[k]) for k in keys.split())
    return "test" if int(hashlib.sha256(setup.encode()).hexdigest()[:8], 16) % 4 == 0 else "train"


def _length(text: object) -> int:
    match = re.match(r"\s*(\d+)", str(text))
    if not match:
        raise ValueError("ISL/OSL not stated")
    return int(match.group(1))


def _load(raw: pd.Series) -> tuple[int | None, int | None, int | None]:
    """(concurrency, num_requests, max_num_seqs) from the concurrency/dataset/notes columns."""
    conc, dataset, notes = str(raw["concurrency"]), str(raw["dataset"]), str(raw["notes"])
    if conc.isdigit():
        return int(conc), None, None
    if m := re.fullmatch(r"batch (\d+)", conc):
        return int(m.group(1)), None, None
    if m := re.fullmatch(r"up to max-num-seqs=(\d+)", conc):
        n = re.search(r"num_prompts=(\d+)", notes)
        return None, int(n.group(1)) if n else int(m.group(1)), int(m.group(1))
    if conc.startswith("unbounded"):
        n = re.search(r"num_requests=(\d+)", notes) or re.search(r"(\d+) prompts", dataset)
        if n:
            return None, int(n.group(1)), None
        raise ValueError("offline row without a request count")
    raise ValueError(f"concurrency {conc!r} not stated")


def parse_row(index: int, raw: pd.Series) -> CalRow:
    """One CSV row as a `CalRow`.

    Raises:
        ValueError: the row cannot be predicted; the message is the reason it is skipped.
    """
    engine = ENGINE_NAMES.get(str(raw["engine"]))
    if engine is None:
        raise ValueError(f"engine {raw['engine']!r} not mapped")
    if not str(raw["tp"]).isdigit():
        raise ValueError(f"parallelism {raw['tp']!r} (disaggregation / EP) not modelled")
    isl, osl = _length(raw["isl"]), _length(raw["osl"])
    if "spec" in str(raw["precision"]).lower():
        # SGLang's EAGLE rows draft trees (topk 4, 16 draft tokens) or leave the settings
        # unstated; the model drafts chains, so these stay out of the fit.
        raise ValueError("speculative decoding with tree drafts / unstated settings")
    if str(raw["precision"]) not in PRECISIONS:
        raise ValueError(f"precision {raw['precision']!r} not mapped")
    key = (str(raw["metric"]), str(raw["unit"]))
    if key not in METRICS:
        raise ValueError(f"metric/unit {key} ambiguous or not per-request-predictable")
    if str(raw["gpu"]) not in GPU_NAMES:
        raise ValueError(f"GPU {raw['gpu']!r} not mapped")
    model = re.sub(r"\s*\(.*\)$", "", str(raw["model"]))
    try:
        get_model(model)
    except ServeFitError as exc:
        raise ValueError(f"model {model!r} not in the catalog") from exc
    concurrency, num_requests, seqs = _load(raw)
    frac = re.search(r"kv_cache_free_gpu_mem_fraction (0\.\d+)", str(raw["notes"]))
    field, factor = METRICS[key]
    precision, kv = PRECISIONS[str(raw["precision"])]
    # NIM's FP8 TRT-LLM profiles quantize the KV cache too (assumed, from the train rows: at
    # c >= 100 throughput x ITL is ~86 running sequences, twice what a bf16 pool holds).
    nim = str(raw["engine"]).startswith("nim")
    if ("ModelOpt" in str(raw["notes"]) or nim) and precision in {"fp8", "nvfp4"}:
        kv = "fp8"
    return CalRow(
        index=index, engine=engine, model=model, gpu=GPU_NAMES[str(raw["gpu"])],
        gpus=int(raw["num_gpus"]), tp=int(raw["tp"]), precision=precision, kv_cache_dtype=kv,
        isl=isl, osl=osl, concurrency=concurrency, num_requests=num_requests, max_num_seqs=seqs,
        gpu_memory_fraction=float(frac.group(1)) if frac else None, metric=field,
        value=float(raw["value"]) * factor, split=_split(raw),
    )


def parse_csv(path: str | Path = DEFAULT_CSV) -> tuple[list[CalRow], list[tuple[int, str]]]:
    """(usable rows, [(row index, why skipped)]); row index is 0-based over data rows.

    Raises:
        UsageError: the CSV cannot be read.
    """
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read calibration CSV ({exc})") from exc
    rows, skipped = [], []
    for i, raw in frame.iterrows():
        try:
            rows.append(parse_row(int(i), raw))  # type: ignore[arg-type]
        except ValueError as exc:
            skipped.append((int(i), str(exc)))  # type: ignore[arg-type]
    return rows, skipped


def predict_row(row: CalRow, params: PerfParams) -> float:
    """The model's value for `row.metric` (SI units, all GPUs)."""
    pred = predict(
        row.engine, get_model(row.model), get_gpu(row.gpu), isl=row.isl, osl=row.osl,  # type: ignore[arg-type]
        concurrency=row.concurrency, num_requests=row.num_requests, gpus=row.gpus, tp=row.tp,
        precision=row.precision, kv_cache_dtype=row.kv_cache_dtype,
        max_num_seqs=row.max_num_seqs, gpu_memory_fraction=row.gpu_memory_fraction,
        params=params,
    )
    return float(getattr(pred, row.metric))


@dataclass(slots=True, frozen=True)
class _Layout:
    """Where each fitted parameter sits in the optimiser's vector (all in log space)."""

    engines: list[str]  # one FITTED block each, or one shared block when `shared`
    families: list[str]  # one SCALES block each
    shared: bool = False

    def size(self) -> int:
        blocks = 1 if self.shared else len(self.engines)
        return blocks * len(FITTED) + len(self.families) * len(SCALES)

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
        return PerfParams(engines=new, gpu_families=fams)

    def start(self, base: PerfParams) -> np.ndarray:
        if self.shared:
            eng = [float(np.exp(np.mean([np.log(getattr(base.engines[e], f))  # type: ignore[index]
                                         for e in self.engines]))) for f in FITTED]
        else:
            eng = [getattr(base.engines[e], f) for e in self.engines for f in FITTED]  # type: ignore[index]
        fam = [getattr(base.scales_for(a), f) for a in self.families for f in SCALES]
        return np.log(np.array(eng + fam, dtype=float))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        blocks = 1 if self.shared else len(self.engines)
        lo = [BOUNDS[f][0] for _ in range(blocks) for f in FITTED]
        hi = [BOUNDS[f][1] for _ in range(blocks) for f in FITTED]
        lo += [SCALE_BOUNDS[0]] * len(self.families) * len(SCALES)
        hi += [SCALE_BOUNDS[1]] * len(self.families) * len(SCALES)
        return np.log(lo), np.log(hi)


def _arch(row: CalRow) -> str:
    return get_gpu(row.gpu).architecture


def _solve(rows: list[CalRow], base: PerfParams, layout: _Layout, prior: np.ndarray,
           weight: float) -> PerfParams:
    """least_squares on log(pred/measured) over `rows` + weight·(x − prior), from `prior`."""
    lo, hi = layout.bounds()

    def residuals(x: np.ndarray) -> np.ndarray:
        params = layout.params(base, x)
        errs = [math.log(max(predict_row(r, params), 1e-12) / r.value) for r in rows]
        return np.concatenate([errs, weight * (x - prior)])

    x0 = np.clip(prior, lo + 1e-9, hi - 1e-9)
    result = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3)
    return layout.params(base, result.x)


def fit(rows: list[CalRow], base: PerfParams | None = None, *,
        weight: float = PRIOR_WEIGHT, pooled: bool = True) -> PerfParams:
    """Least squares on log(pred / measured) over `rows`, from `base` (default: the defaults).

    Stage 1 (`pooled`): one parameter set shared by the rows' engines, plus per-family GPU
    scales (all but the Hopper reference), prior = `base`. Stage 2: each engine's own set and
    the scales, prior = stage 1's result. Deterministic: fixed starts, no random restarts.
    Engines and families without rows keep `base`.
    """
    base = base or default_params()
    engines = sorted({r.engine for r in rows})
    families = sorted({_arch(r) for r in rows} - {REFERENCE_ARCH})
    if pooled:
        shared = _Layout(engines, families, shared=True)
        base = _solve(rows, base, shared, shared.start(base), weight)
    own = _Layout(engines, families)
    return _solve(rows, base, own, own.start(base), weight)


def errors(rows: list[CalRow], params: PerfParams) -> list[float]:
    """Absolute percentage error of each row, in %."""
    return [abs(predict_row(r, params) / r.value - 1.0) * 100.0 for r in rows]


def _summary(rows: list[CalRow], params: PerfParams) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for split in ("train", "test"):
        for engine in ("all", *sorted({r.engine for r in rows})):
            sel = [r for r in rows if r.split == split and engine in ("all", r.engine)]
            if sel:
                ape = errors(sel, params)
                out[f"{split}/{engine}"] = {
                    "rows": len(sel),
                    "median_ape_pct": round(float(np.median(ape)), 2),
                    "p90_ape_pct": round(float(np.percentile(ape, 90)), 2),
                }
    return out


def calibrate(csv: str | Path = DEFAULT_CSV, out: str | Path = FIT_FILE) -> dict:
    """Parse, fit on the train split, evaluate both splits, write `out`; returns the record."""
    rows, skipped = parse_csv(csv)
    params = fit([r for r in rows if r.split == "train"])
    record = {
        "schema_version": 1,
        "provenance": {
            "csv": str(Path(csv).name),
            "csv_sha256": hashlib.sha256(Path(csv).read_bytes()).hexdigest(),
            "date": dt.date.today().isoformat(),
            "rows_used": [r.index for r in rows],
            "rows_train": [r.index for r in rows if r.split == "train"],
            "rows_test": [r.index for r in rows if r.split == "test"],
            "rows_skipped": [{"row": i, "reason": why} for i, why in skipped],
            "split_rule": TEST_RULE,
            "objective": "least_squares on log(pred/measured), train rows only; stage 1 one "
            f"parameter set shared by all engines (prior {PRIOR_WEIGHT} x log(param/default)),"
            f" stage 2 per engine (prior {PRIOR_WEIGHT} x log(param/stage 1)); fitted per "
            f"engine: {', '.join(FITTED)}; per GPU architecture (reference {REFERENCE_ARCH} "
            f"= 1): {', '.join(SCALES)}",
            "assumptions": [
                "NIM rows counted as trtllm", "A100 of unstated size = A100-80GB",
                "trtllm-bench ModelOpt FP8/FP4 checkpoints run an FP8 KV cache",
                "NIM FP8 profiles run an FP8 KV cache (train rows: throughput x ITL at "
                "c >= 100 is ~86 running sequences, twice a bf16 pool)",
                "ShareGPT rows use the stated mean ISL/OSL as fixed lengths",
            ],
        },
        "params": json.loads(params.model_dump_json()),
        "errors": _summary(rows, params),
    }
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return record


def main(argv: list[str] | None = None) -> int:
    """CLI: regenerate the fit file, or (--measured) refit it to the user's own runs."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--csv", default=str(DEFAULT_CSV))
    parser.add_argument("--out", help=f"fit file to write (default {FIT_FILE.name} here; "
                        "with --measured: fit_measured.json in the current folder)")
    parser.add_argument("--measured", metavar="RUNS", help="CSV or JSON Lines of measured "
                        "runs (engine, model, gpu, tp, isl, osl, concurrency|num_requests, "
                        "metric, value): refit from --base as the prior")
    parser.add_argument("--base", default=str(FIT_FILE), help="prior fit for --measured")
    args = parser.parse_args(argv)
    try:
        if args.measured:
            from recommender.refit import refit_measured, report

            out = args.out or "fit_measured.json"
            print(f"wrote {out}: " + report(refit_measured(args.measured, out, args.base)))
            return 0
        args.out = args.out or str(FIT_FILE)
        record = calibrate(args.csv, args.out)
    except ServeFitError as exc:
        print(f"error: {exc}")
        return 2
    print(f"wrote {args.out}: {len(record['provenance']['rows_used'])} rows used, "
          f"{len(record['provenance']['rows_skipped'])} skipped")
    for key, value in record["errors"].items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["CalRow", "EngineParams", "calibrate", "errors", "fit", "parse_csv", "predict_row"]
