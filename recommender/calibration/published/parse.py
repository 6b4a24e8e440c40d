"""The published CSV as calibration rows: `parse_row` (one CSV row as a `CalRow`, or the reason
it is skipped), the stated hash rule that splits the rows into train and test (TEST_RULE), and
`parse_csv`: every usable row of the file, one throughput per run, no chunked-stream ITL.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pandas as pd

from core.errors import ServeFitError, UsageError
from recommender.calibration.cal_row import CalRow
from recommender.calibration.published.columns import (
    Raw,
    checkpoint_kv_of,
    dataset_of,
    length_of,
    load_of,
    max_model_len_of,
    parallelism_of,
    rate_of,
    stated_flags_of,
    version_of,
)
from recommender.calibration.published.labels import ENGINE_NAMES, gpu_of, metric_of, precision_of
from recommender.calibration.published.runs import chunk_gap_itl, one_throughput_per_run
from recommender.calibration.published.sources import family_of, source_key
from recommender.catalog.lookup import get_model

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CSV = REPO / "data" / "calibration" / "published_calibration.csv.gz"
TEST_RULE = (
    "test iff int(sha256(setup)[:8], 16) % 4 == 0, setup = source|engine|model|gpu|num_gpus|"
    "tp|precision|isl|osl|dataset|concurrency|notes (all metrics of one run stay together)"
)

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


def parse_row(index: int, raw: Raw) -> CalRow:
    """One CSV row as a `CalRow`.

    Raises:
        ValueError: the row cannot be predicted; the message is the reason it is skipped.
    """
    engine = ENGINE_NAMES.get(str(raw["engine"]))
    if engine is None:
        raise ValueError(f"engine {raw['engine']!r} not mapped")
    tp, dp, ep = parallelism_of(raw["tp"])
    dataset = dataset_of(raw)
    isl, osl = length_of(raw["isl"], dataset), length_of(raw["osl"], dataset)
    if "spec" in str(raw["precision"]).lower():
        # SGLang's EAGLE rows draft trees (topk 4, 16 draft tokens) or leave the settings
        # unstated; the model drafts chains, so these stay out of the fit.
        raise ValueError("speculative decoding with tree drafts / unstated settings")
    precision, kv = precision_of(raw["precision"])
    field, factor = metric_of(str(raw["metric"]), str(raw["unit"]), int(raw["num_gpus"]))
    gpu = gpu_of(str(raw["gpu"]))
    model = re.sub(r"\s*\(.*\)$", "", str(raw["model"]))
    try:
        get_model(model)
    except ServeFitError as exc:
        raise ValueError(f"model {model!r} not in the catalog") from exc
    concurrency, num_requests, seqs = load_of(raw)
    stated = stated_flags_of(raw, engine)
    # NIM's FP8 TRT-LLM profiles quantize the KV cache too (assumed, from the train rows: at
    # c >= 100 throughput x ITL is ~86 running sequences, twice what a bf16 pool holds).
    nim = str(raw["engine"]).startswith("nim")
    if ("ModelOpt" in str(raw["notes"]) or nim) and precision in {"fp8", "nvfp4"}:
        kv = "fp8"
    version = None if nim else version_of(raw["engine_version"])
    if kv == "auto":
        kv = checkpoint_kv_of(raw, engine, version) or kv
    return CalRow(
        index=index, engine=engine, model=model, gpu=gpu, rate_rps=rate_of(raw),
        gpus=int(raw["num_gpus"]), tp=tp, dp=dp, ep=ep, precision=precision, kv_cache_dtype=kv,
        isl=isl, osl=osl, concurrency=concurrency, num_requests=num_requests,
        max_num_seqs=seqs if seqs is not None else stated.max_num_seqs,
        gpu_memory_fraction=stated.gpu_memory_fraction, metric=field,
        value=float(raw["value"]) * factor, split=_split(raw),
        source=source_key(str(raw["source"])), family=family_of(str(raw["source"])),
        dataset=dataset,
        harness="in_process" if any(k in str(raw["notes"]) for k in IN_PROCESS_MARKS)
        else "served",
        engine_version=version,  # None for NIM: it states its own release, not its engine's
        max_model_len=max_model_len_of(raw, stated),
        max_batched_tokens=stated.max_batched_tokens, chunked_prefill=stated.chunked_prefill,
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
