"""Fit the performance model's per-engine parameters to published measurements.

Parses `data/calibration/published_calibration.csv.gz` (a copy of the shared benchmark set) into
typed rows (names mapped onto the catalog, metrics normalised to seconds / per-second over
all GPUs), splits them by a stated hash rule, fits `PerfParams` with least squares on log
relative error over the train rows, and writes data/calibration/fit.json with provenance.
Run `python -m recommender.calibration.calibrate`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.atomic import write_atomic
from core.errors import ServeFitError, UsageError
from core.load import Dataset
from engines.registry import ENGINES
from recommender.calibration.fitting import (
    FITTED,
    PROCEDURE,
    REFERENCE_ARCH,
    SCALES,
    CalRow,
    errors,
    fit,
    refusal,
)
from recommender.calibration.refit import refit_measured, report
from recommender.catalog.lookup import bundled_model, find_bundled, get_gpu, get_model
from recommender.model.defaults import release_of
from recommender.model.params import FIT_FILE, PerfParams, default_params
from recommender.model.steptime import DEFAULT_KIND, PROVIDERS

Raw = Mapping[str, Any]  # one CSV row: column name -> cell (NaN where empty)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CSV = REPO / "data" / "calibration" / "published_calibration.csv.gz"
TEST_RULE = (
    "test iff int(sha256(setup)[:8], 16) % 4 == 0, setup = source|engine|model|gpu|num_gpus|"
    "tp|precision|isl|osl|dataset|concurrency|notes (all metrics of one run stay together)"
)
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
# SXM systems; GPUStack's pages that say which H100 name the SXM, so its unstated ones too).
# The GPUStack A100's memory is not stated: a 40 GB card cannot hold Qwen3-14B
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
    "H100 (SXM/PCIe not stated)": "H100-SXM",
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
    # The checkpoints' own formats: gpt-oss ships its experts in MXFP4, DeepSeek in FP8.
    "MXFP4 (native gpt-oss checkpoint)": ("mxfp4", "auto"),
    "FP8 (native DeepSeek)": ("fp8", "auto"),
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


# Who measured a source with which harness (first match wins): one family may span many
# pages (all of GPUStack's performance lab is one harness, one client, one set of habits),
# so leave-one-family-out holds them out together. Sources no pattern names fall back to
# their publisher: a URL's domain, or a repository's owner.
FAMILY_PATTERNS = (
    (r"gpustack", "gpustack"),
    (r"docs\.nvidia\.com/nim", "nvidia-nim"),
    (r"nvidia/tensorrt-llm docs/source/performance", "nvidia-trtllm-perf-docs"),
    (r"nvidia/tensorrt-llm docs/source/blogs|developer\.nvidia\.com/blog", "nvidia-trtllm-blogs"),
    # InferenceX's harness wherever its results are published: SemiAnalysis's dashboard
    # data, a re-run of its scripts on a Nebius cluster, the Kimi-K2.5 vLLM recipe's tables
    # (credited there to InferenceX).
    (r"semianalysis|inferencex|inferencemax|heyram74/nebius|recipes moonshotai/kimi-k2\.5",
     "inferencex"),
    # AMD's own vLLM measurements: the ROCm vLLM image's README and the performance-results
    # page that republishes its tables.
    (r"amd\.com/.*/rocm-hub|rocm/vllm docs/dev-docker", "amd-rocm-results"),
    (r"rocm\.blogs\.amd\.com|rocm/rocm-blogs", "amd-rocm-blogs"),
    (r"lm-sys|lmsys\.org", "lmsys"),
    (r"sgl-project/sglang", "sglang-docs"),
    (r"blog\.vllm\.ai|vllm-project/vllm-project\.github\.io|vllm-project/recipes"
     r"|buildkite\.com/vllm", "vllm-project"),
    (r"vllm-project/vllm", "vllm-github"),
    (r"mlcommons|mlperf", "mlperf"),
)


def family_of(source: str) -> str:
    """The publisher family of a source (`FAMILY_PATTERNS`, else its domain or owner)."""
    low = source.lower()
    for pattern, family in FAMILY_PATTERNS:
        if re.search(pattern, low):
            return family
    if m := re.match(r"https?://(?:www\.)?([^/]+)", low):
        return m.group(1)
    return low.split("/")[0].split()[0] if low else "unknown"


def source_key(source: str) -> str:
    """The publication a row comes from: its `source` without a locale or snapshot note, so
    one page's snapshots and translations (AMD's en/ja/zh-cn results page) are one source and
    leave-one-source-out never fits on a copy of what it holds out."""
    text = re.sub(r"\s*\(.*\)\s*$", "", source.strip())
    return re.sub(r"amd\.com/[a-z]{2}(-[a-z]{2})?/", "amd.com/", text)


# How a row's notes name a run that drove the engine in-process, with no API server
# (`resolve.HARNESSES["in_process"]`): trtllm-bench (TensorRT-LLM perf-overview), vLLM's
# offline throughput and latency benchmark scripts (AMD's MI300X page, vLLM issue 12315),
# or the word itself (MLPerf's LoadGen, Argonne's static batches).
IN_PROCESS_MARKS = ("trtllm-bench", "offline throughput benchmark", "latency benchmark",
                    "benchmark_throughput", "in-process")


def _split(raw: Raw) -> str:
    keys = ("source engine model gpu num_gpus tp precision isl osl dataset concurrency notes")
    setup = "|".join(str(raw[k]) for k in keys.split())
    return "test" if int(hashlib.sha256(setup.encode()).hexdigest()[:8], 16) % 4 == 0 else "train"


def _length(text: object, dataset: Dataset | None = None) -> int:
    """A row's ISL or OSL: the mean it states. A set length of InferenceX's random dataset
    ("1024 (set; ...)") is turned into the mean the run drew: randint(int(0.8 L), L)."""
    match = re.match(r"\s*(\d+)(\s*\(set\b)?", str(text))
    if not match:
        raise ValueError("ISL/OSL not stated")
    length = int(match.group(1))
    if dataset == "random-range-0.8" and match.group(2):
        return round((int(0.8 * length) + length) / 2)
    return length


def _rate(raw: Raw) -> float | None:
    """The Poisson rate (req/s) of an open-loop row ("open loop (Poisson)"), else None.

    Raises:
        ValueError: an open-loop row whose rate or request count is not stated.
    """
    if not str(raw["concurrency"]).startswith("open loop"):
        return None
    try:
        rate = float(str(raw["request_rate"]))
    except ValueError:
        raise ValueError(f"open-loop rate {raw['request_rate']!r} not stated") from None
    if not (rate > 0 and np.isfinite(rate)):
        raise ValueError(f"open-loop rate {rate} not a positive number")
    if not re.search(r"num_(?:requests|prompts)=(\d+)", str(raw["notes"])):
        raise ValueError("open-loop row without a request count")
    return rate


def _load(raw: Raw) -> tuple[int | None, int | None, int | None]:
    """(concurrency, num_requests, max_num_seqs) from the concurrency/dataset/notes columns
    (concurrency None: offline, or open loop when `_rate` names a rate)."""
    conc, dataset, notes = str(raw["concurrency"]), str(raw["dataset"]), str(raw["notes"])
    if conc.startswith("open loop"):
        n = re.search(r"num_(?:requests|prompts)=(\d+)", notes)
        return None, int(n.group(1)) if n else None, None
    if conc.isdigit():
        n = re.search(r"num_prompts=(\d+)", notes)
        return int(conc), int(n.group(1)) if n else None, None
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


def _dataset(raw: Raw) -> Dataset | None:
    """The length distribution a row's run drew from, where the row states its mean lengths
    (recommender.sim.lengths spreads the requests around them as the run did): vllm bench
    serve's ShareGPT sampling, or bench_serving's random dataset with --random-range-ratio
    0.8 (InferenceX: each length uniform in [0.8, 1] x the set length; its rows state the
    means). None: fixed lengths."""
    text = f"{raw['dataset']} {raw['notes']}".lower()
    if "sharegpt" in str(raw["dataset"]).lower():
        return "sharegpt"
    # The Kimi-K2.5 recipe's InferenceX runs name no ratio, but their printed totals do:
    # 37,068 prompt tokens over 40 requests set to 1,024 is 0.905 of it (U[0.8, 1]: 0.9).
    if re.search(r"random-range-ratio 0\.8\b|\brandom\b.* via inferencex\b", text):
        return "random-range-0.8"
    return None


def _version(text: object) -> str | None:
    """The engine release a row states ("0.10.1", "1.0"), None when it states none."""
    found = re.search(r"\d+\.\d+(\.\d+)?", str(text))
    return found.group(0) if found else None


def _parallelism(text: object) -> tuple[int, int, int]:
    """(tp, dp, ep) of the row's parallelism column: "8" (TP), "TP8EP8" / "TEP8" (experts
    over the TP group), "DEP8" (attention data parallelism, experts over every rank) or
    "TP2DEP4"-style (attention TP within each DP rank).

    Raises:
        ValueError: a layout the model does not serve (disaggregation, PP, partial EP).
    """
    spec = str(text).strip().upper()
    if spec.isdigit():
        return int(spec), 1, 1
    if m := re.fullmatch(r"(?:TP(\d+)EP\1|TEP(\d+))", spec):
        n = int(m.group(1) or m.group(2))
        return n, 1, n
    if m := re.fullmatch(r"(?:TP(\d+))?DEP(\d+)", spec):
        tp = int(m.group(1) or 1)
        dp = int(m.group(2)) // tp
        if dp < 1 or dp * tp != int(m.group(2)):
            raise ValueError(f"parallelism {text!r}: DEP size not a multiple of its TP")
        return tp, dp, tp * dp
    raise ValueError(f"parallelism {text!r} (disaggregation / pipeline) not modelled")


# Precision labels the exact map lacks, by the format they name (first match wins):
# "MXFP4", "NVFP4 weights", "FP8 (block)", "BF16"...
PRECISION_WORDS = (("mxfp4", "mxfp4"), ("nvfp4", "nvfp4"), ("fp4", "nvfp4"), ("fp8", "fp8"),
                   ("int4", "int4"), ("awq", "awq"), ("gptq", "gptq"), ("int8", "int8"),
                   ("bf16", "bf16"), ("fp16", "fp16"))
# A throughput stated per GPU or per N-GPU node: multiplied to all GPUs of the run.
PER_GPU = re.compile(r"(?:per|/)\s*gpu\b", re.IGNORECASE)
PER_NODE = re.compile(r"per\s+(\d+)-gpu\s+node", re.IGNORECASE)


def _precision(label: object) -> tuple[str, str]:
    """(predict precision, kv_cache_dtype) of a row's precision label.

    Raises:
        ValueError: a label naming no format the model knows.
    """
    text = str(label)
    if text in PRECISIONS:
        return PRECISIONS[text]
    low = text.lower()
    kv = "fp8" if re.search(r"fp8\s*kv|kv\s*fp8", low) else "auto"
    for word, precision in PRECISION_WORDS:
        if word in low:
            return precision, kv
    raise ValueError(f"precision {text!r} not mapped")


def _metric(metric: str, unit: str, gpus: int) -> tuple[str, float]:
    """(Prediction field, factor to SI over all GPUs) of a row's metric and unit: the exact
    map, or a throughput stated per GPU / per node scaled to the run's GPUs.

    Raises:
        ValueError: a metric/unit that is ambiguous or not predictable per request.
    """
    if (metric, unit) in METRICS:
        return METRICS[(metric, unit)]
    per_node = PER_NODE.search(unit)
    scale = gpus if PER_GPU.search(unit) else (gpus / int(per_node.group(1)) if per_node
                                               else None)
    base = re.sub(r"_per_(gpu|node)$", "", metric)
    fields = {"output_throughput": "output_throughput_tok_s",
              "total_output_throughput": "output_throughput_tok_s",
              "total_token_throughput": "total_throughput_tok_s",
              "request_throughput": "request_throughput_rps"}
    if scale is not None and base in fields:
        return fields[base], float(scale)
    raise ValueError(f"metric/unit {(metric, unit)} ambiguous or not per-request-predictable")


def _gpu(label: str) -> str:
    """The catalog name of a row's GPU: the map's, else the catalog's own name or alias.

    Raises:
        ValueError: a GPU the catalog lacks.
    """
    if label in GPU_NAMES:
        return GPU_NAMES[label]
    try:
        return get_gpu(label).name
    except ServeFitError as exc:
        raise ValueError(f"GPU {label!r} not mapped") from exc


# A Hugging Face id (org/name) in a row's model column: the checkpoint served, in parentheses.
HF_ID = re.compile(r"\b[\w.-]+/[\w.-]+")


def _checkpoint_kv(raw: Raw, engine: str, version: str | None) -> str | None:
    """The KV-cache format the served checkpoint declares, where the row names a checkpoint
    aiconfigurator-core bundles the config of (nvidia/Kimi-K2.5-NVFP4: a kv_cache_scheme of
    8-bit floats) and the row's release serves it under auto; else None."""
    named = HF_ID.findall(str(raw["model"]).partition("(")[2])
    for found in filter(None, map(find_bundled, named)):
        declared = bundled_model(found.hf_id).checkpoint_kv_dtype
        if declared and ENGINES[engine].serves_checkpoint_kv_dtype(release_of(version)):
            return declared
    return None


def parse_row(index: int, raw: Raw) -> CalRow:
    """One CSV row as a `CalRow`.

    Raises:
        ValueError: the row cannot be predicted; the message is the reason it is skipped.
    """
    engine = ENGINE_NAMES.get(str(raw["engine"]))
    if engine is None:
        raise ValueError(f"engine {raw['engine']!r} not mapped")
    tp, dp, ep = _parallelism(raw["tp"])
    dataset = _dataset(raw)
    isl, osl = _length(raw["isl"], dataset), _length(raw["osl"], dataset)
    if "spec" in str(raw["precision"]).lower():
        # SGLang's EAGLE rows draft trees (topk 4, 16 draft tokens) or leave the settings
        # unstated; the model drafts chains, so these stay out of the fit.
        raise ValueError("speculative decoding with tree drafts / unstated settings")
    precision, kv = _precision(raw["precision"])
    field, factor = _metric(str(raw["metric"]), str(raw["unit"]), int(raw["num_gpus"]))
    gpu = _gpu(str(raw["gpu"]))
    model = re.sub(r"\s*\(.*\)$", "", str(raw["model"]))
    try:
        get_model(model)
    except ServeFitError as exc:
        raise ValueError(f"model {model!r} not in the catalog") from exc
    concurrency, num_requests, seqs = _load(raw)
    frac = re.search(r"kv_cache_free_gpu_mem_fraction (0\.\d+)", str(raw["notes"]))
    fraction = float(frac.group(1)) if frac else None
    # NIM's FP8 TRT-LLM profiles quantize the KV cache too (assumed, from the train rows: at
    # c >= 100 throughput x ITL is ~86 running sequences, twice what a bf16 pool holds).
    nim = str(raw["engine"]).startswith("nim")
    if ("ModelOpt" in str(raw["notes"]) or nim) and precision in {"fp8", "nvfp4"}:
        kv = "fp8"
    version = None if nim else _version(raw["engine_version"])
    if kv == "auto":
        kv = _checkpoint_kv(raw, engine, version) or kv
    return CalRow(
        index=index, engine=engine, model=model, gpu=gpu, rate_rps=_rate(raw),
        gpus=int(raw["num_gpus"]), tp=tp, dp=dp, ep=ep, precision=precision, kv_cache_dtype=kv,
        isl=isl, osl=osl, concurrency=concurrency, num_requests=num_requests, max_num_seqs=seqs,
        gpu_memory_fraction=fraction, metric=field,
        value=float(raw["value"]) * factor, split=_split(raw),
        source=source_key(str(raw["source"])), family=family_of(str(raw["source"])),
        dataset=dataset,
        harness="in_process" if any(k in str(raw["notes"]) for k in IN_PROCESS_MARKS)
        else "served",
        engine_version=version,  # None for NIM: it states its own release, not its engine's
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
    # plain dicts: a Series per row (iterrows) cost ~2 s of index lookups over 4,000 rows
    for i, raw in enumerate(frame.to_dict("records")):
        try:
            rows.append(parse_row(i, raw))
        except ValueError as exc:
            skipped.append((int(i), str(exc)))
    rows, chunked = chunk_gap_itl(rows)
    kept, restated = one_throughput_per_run(rows)
    return kept, sorted(skipped + chunked + restated)


# Above this ITL / TPOT ratio a run's ITL is the gap between stream chunks. Token-by-token
# streams measure the two within 1.34x of each other in the CSV (the token-weighted and the
# per-request mean of the same gaps); chunked ones at 10x and 30x.
CHUNKED_ITL_RATIO = 1.5


def chunk_gap_itl(rows: list[CalRow]) -> tuple[list[CalRow], list[tuple[int, str]]]:
    """(rows, [(row index, why skipped)]) without the ITL of runs whose server streamed
    tokens in chunks: InferenceX's launch scripts set TRT-LLM's `stream_interval: 10` and
    SGLang's `--stream-interval 30`, so the client sees one chunk per 10 or 30 decode steps
    and its mean ITL is that many TPOTs. The model predicts the per-token gap, and the rows
    do not state the interval, so such an ITL says nothing it can be scored on."""
    out, skipped = [], []
    for block in _runs(rows):
        by_metric = {r.metric: r for r in block}
        itl, tpot = by_metric.get("itl_s"), by_metric.get("tpot_s")
        ratio = itl.value / tpot.value if itl and tpot and tpot.value > 0 else 0.0
        for r in block:
            if r is itl and ratio > CHUNKED_ITL_RATIO:
                skipped.append((r.index, f"ITL {ratio:.1f}x the run's TPOT: a chunked "
                                         "stream's gap, not a token's"))
            else:
                out.append(r)
    return out, skipped


# A run's throughput in the order it is kept when a page states it several ways.
THROUGHPUT_ORDER = ("output_throughput_tok_s", "total_throughput_tok_s",
                    "request_throughput_rps")


def one_throughput_per_run(rows: list[CalRow]) -> tuple[list[CalRow], list[tuple[int, str]]]:
    """(rows, [(row index, why skipped)]) with one throughput figure per run: a page that
    prints requests/s, output tokens/s and total tokens/s of one run (vllm bench serve does)
    states one measurement three ways (total = output x (ISL + OSL) / OSL, requests =
    output / OSL at the run's mean lengths), and counting it three times would give its
    publisher three votes in every median. Output tokens/s is kept, else total, else
    requests/s; the run's latencies stay. A run is a block of consecutive rows with one
    setup and no metric twice (a page's runs that differ only in flags the rows do not
    parse stay apart)."""
    out, skipped = [], []
    for block in _runs(rows):
        throughputs = [r for r in block if r.metric in THROUGHPUT_ORDER]
        keep = min(throughputs, key=lambda r: THROUGHPUT_ORDER.index(r.metric), default=None)
        for r in block:
            if r.metric in THROUGHPUT_ORDER and r is not keep:
                skipped.append((r.index, f"restates row {keep.index}'s throughput "  # type: ignore[union-attr]
                                         "(one run, one throughput figure)"))
            else:
                out.append(r)
    return out, skipped


_NOT_SETUP = ("index", "metric", "value", "split")


def _runs(rows: list[CalRow]) -> list[list[CalRow]]:
    # a row's setup is every field but what one run's rows differ in (getattr, not asdict:
    # asdict deep-copies every row on every call, ~4 s a parse)
    names = sorted(f.name for f in dataclasses.fields(CalRow) if f.name not in _NOT_SETUP)

    def setup(r: CalRow) -> tuple:
        return tuple(getattr(r, k) for k in names)

    blocks: list[list[CalRow]] = []
    for r in sorted(rows, key=lambda r: r.index):
        last = blocks[-1] if blocks else None
        if (last and setup(last[-1]) == setup(r) and last[-1].index == r.index - 1
                and r.metric not in {x.metric for x in last}):
            last.append(r)
        else:
            blocks.append([r])
    return blocks


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
    """Parse, fit on all rows (`fitting.fit`, the one procedure), report the errors on both
    hash splits (through `predict`, in-sample), write `out`; returns the record.

    All rows, not the train split: what the fit generalises to is measured by
    leave-one-source-out (bench/predict_accuracy.py, whose folds use this same procedure),
    so holding rows back here would only make the shipped parameters worse. The split's
    errors are in-sample.
    """
    rows, skipped = parse_csv(csv)
    base = default_params(DEFAULT_KIND)
    refused = {r.index: why for r in rows if (why := refusal(r, base)) is not None}
    skipped = sorted(skipped + [(i, f"refused by the model: {why}") for i, why in refused.items()])
    rows = [r for r in rows if r.index not in refused]
    # Each provider's overheads fitted beside its own kernel times; the measured provider's
    # fit carries the roofline's as its fallback, fitted first on the same rows.
    params = fit(rows, step_time=DEFAULT_KIND)
    by_kind = {DEFAULT_KIND: params}
    if params.fallback is not None:
        by_kind[params.fallback.step_time] = params.fallback
    for kind in PROVIDERS:
        if kind not in by_kind:  # not setdefault: its argument would refit every provider
            by_kind[kind] = fit(rows, step_time=kind)
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
            "split_rule": TEST_RULE + " (both splits fitted on; their errors are in-sample)",
            "fit_procedure": PROCEDURE,
            "step_time": f"params: the default provider's ({DEFAULT_KIND}); "
                         "params_by_step_time: one fit per provider (recommender.model.steptime)",
            "objective": f"{PROCEDURE}; fitted per engine: {', '.join(FITTED)}; per GPU "
            f"architecture (reference {REFERENCE_ARCH} = 1): {', '.join(SCALES)}",
            "assumptions": [
                "NIM rows counted as trtllm", "A100 of unstated size = A100-80GB",
                "H100 of unstated form factor (GPUStack pages) = H100-SXM",
                "trtllm-bench ModelOpt FP8/FP4 checkpoints run an FP8 KV cache",
                "NIM FP8 profiles run an FP8 KV cache (train rows: throughput x ITL at "
                "c >= 100 is ~86 running sequences, twice a bf16 pool)",
                "ShareGPT rows use the stated mean ISL/OSL as fixed lengths",
            ],
        },
        "params": json.loads(params.model_dump_json(exclude={"fallback", "step_time"})),
        # each provider's own fit; load_params attaches the fallback's as `fallback`
        "params_by_step_time": {
            k: json.loads(p.model_dump_json(exclude={"fallback", "step_time"}))
            for k, p in by_kind.items()},
        "errors": _summary(rows, params),
    }
    write_atomic(out, json.dumps(record, indent=2) + "\n")
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


__all__ = ["FAMILY_PATTERNS", "calibrate", "family_of", "parse_csv",
           "source_key"]
