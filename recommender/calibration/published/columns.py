"""What a published CSV row's deployment and load columns state: its mean lengths
(`length_of`), its load (`load_of`, `rate_of`), the length distribution it drew from
(`dataset_of`), the engine release (`version_of`), the parallel layout (`parallelism_of`) and
the KV-cache format its checkpoint declares (`checkpoint_kv_of`). The labels mapped onto the
catalog are `recommender.calibration.published.labels`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.load import Dataset
from engines.registry import ENGINES
from recommender.catalog.bundled import bundled_model, find_bundled
from recommender.model.defaults import release_of

Raw = Mapping[str, Any]  # one CSV row: column name -> cell (NaN where empty)


def length_of(text: object, dataset: Dataset | None = None) -> int:
    """A row's ISL or OSL: the mean it states. A set length of InferenceX's random dataset
    ("1024 (set; ...)") is turned into the mean the run drew: randint(int(0.8 L), L)."""
    match = re.match(r"\s*(\d+)(\s*\(set\b)?", str(text))
    if not match:
        raise ValueError("ISL/OSL not stated")
    length = int(match.group(1))
    if dataset == "random-range-0.8" and match.group(2):
        return round((int(0.8 * length) + length) / 2)
    return length


def rate_of(raw: Raw) -> float | None:
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


def load_of(raw: Raw) -> tuple[int | None, int | None, int | None]:
    """(concurrency, num_requests, max_num_seqs) from the concurrency/dataset/notes columns
    (concurrency None: offline, or open loop when `rate_of` names a rate)."""
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


def dataset_of(raw: Raw) -> Dataset | None:
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


# The knobs a row's notes quote from its server, build or benchmark command, per engine (the
# flags `predict` takes for them: --max-model-len, --max-batched-tokens, --max-num-seqs,
# --gpu-memory-fraction): `vllm serve … --max-num-seqs 1024`, `trtllm-serve
# --max_num_tokens=16384`, an MLPerf config's "gpu_batch_size 896, max_num_tokens 1536,
# kv_cache_free_gpu_mem_fraction 0.9" (NVIDIA's harness builds the engine's max batch size
# from gpu_batch_size), `--mem-fraction-static 0.85`. Each field lists every spelling the
# notes use; the engine's own meaning of the fraction is the plug-in's (vLLM: of the whole
# memory; TensorRT-LLM: of what the weights leave free; SGLang: static share).
_STATED: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {"max_model_len": (r"--max-model-len[ =](\d+)\b",),
             "max_batched_tokens": (r"--max-num-batched-tokens[ =](\d+)\b",),
             "max_num_seqs": (r"--max-num-seqs[ =](\d+)\b",),
             "gpu_memory_fraction": (r"--gpu-memory-utilization[ =](0?\.\d+)\b",)},
    "trtllm": {"max_batched_tokens": (r"--max_num_tokens[ =](\d+)\b", r"\bmax_num_tokens (\d+)\b"),
               "max_num_seqs": (r"--max_batch_size[ =](\d+)\b", r"\bgpu_batch_size (\d+)\b",
                                r"\bmax_batch_size (\d+)\b"),
               "gpu_memory_fraction": (r"\bkv_cache_free_gpu_mem_fraction (0\.\d+)",
                                       r"\bfree_gpu_memory_fraction[ =:]+(0\.\d+)")},
    "sglang": {"max_batched_tokens": (r"--chunked-prefill-size[ =](\d+)\b",),
               "max_num_seqs": (r"--max-running-requests[ =](\d+)\b",),
               "gpu_memory_fraction": (r"--mem-fraction-static[ =](0?\.\d+)\b",)},
}
_VLLM_UNCHUNKED = r"--enable-chunked-prefill[ =](False|false)\b|--no-enable-chunked-prefill\b"


@dataclass(frozen=True, slots=True)
class StatedFlags:
    """The knobs a row's quoted commands or config set (None: not quoted, or quoted with two
    values, e.g. an MLPerf config's build and runtime max_num_tokens, which is ambiguous)."""

    max_model_len: int | None = None
    max_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_fraction: float | None = None
    chunked_prefill: bool | None = None


def stated_flags_of(raw: Raw, engine: str) -> StatedFlags:
    """The knobs the notes of a row of `engine` (a plug-in kind) quote (`StatedFlags`)."""
    notes = str(raw["notes"])
    found: dict[str, Any] = {}
    for field, patterns in _STATED.get(engine, {}).items():
        values = {float(v) for pattern in patterns for v in re.findall(pattern, notes)}
        if len(values) == 1:
            value = values.pop()
            found[field] = value if field == "gpu_memory_fraction" else int(value)
    chunked = None
    if engine == "vllm" and re.search(_VLLM_UNCHUNKED, notes):
        chunked = False
    # NVIDIA's MLPerf harness runs TensorRT-LLM with chunked context on: its reference
    # configs' runtime flags set `enable_chunked_context: True` beside the max_num_tokens
    # the notes quote (256-3584: at 256 and 768 llama2-70b's 1,021-token prompts need it).
    if engine == "trtllm" and "MLPerf" in notes and "max_batched_tokens" in found:
        chunked = True
    return StatedFlags(**found, chunked_prefill=chunked)


def max_model_len_of(raw: Raw, stated: StatedFlags) -> int | None:
    """The served max_model_len where the row states it: Lambda's result files name it
    (`..._tp4_len16000.json`; the notes say "max_model_len per filename (_lenN)" or
    "max_model_len 16000 per filename"), else what the notes' quoted command sets (`stated`,
    from `stated_flags_of`)."""
    if re.search(r"max_model_len (\d+ )?per filename", str(raw["notes"])):
        found = re.search(r"_len(\d+)\.json", str(raw["source"]))
        return int(found.group(1)) if found else None
    return stated.max_model_len


def version_of(text: object) -> str | None:
    """The engine release a row states ("0.10.1", "1.0"), None when it states none."""
    found = re.search(r"\d+\.\d+(\.\d+)?", str(text))
    return found.group(0) if found else None


def parallelism_of(text: object) -> tuple[int, int, int]:
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


# A Hugging Face id (org/name) in a row's model column: the checkpoint served, in parentheses.
HF_ID = re.compile(r"\b[\w.-]+/[\w.-]+")


def checkpoint_kv_of(raw: Raw, engine: str, version: str | None) -> str | None:
    """The KV-cache format the served checkpoint declares, where the row names a checkpoint
    aiconfigurator-core bundles the config of (nvidia/Kimi-K2.5-NVFP4: a kv_cache_scheme of
    8-bit floats) and the row's release serves it under auto; else None."""
    named = HF_ID.findall(str(raw["model"]).partition("(")[2])
    for found in filter(None, map(find_bundled, named)):
        declared = bundled_model(found.hf_id).checkpoint_kv_dtype
        if declared and ENGINES[engine].serves_checkpoint_kv_dtype(release_of(version)):
            return declared
    return None
