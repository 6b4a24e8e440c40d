"""The measured-kernel step-time provider: NVIDIA's measured per-operation tables
(aiconfigurator-core 0.12.0, Apache-2.0, CPU-only, bundled data) behind `steptime`.

Owns `measured_kernels` (the provider factory of kind "measured": a `MeasuredKernels` for a
covered cell, None otherwise), the name maps from ServeFit's catalog onto aiconfigurator's
systems, backends, model paths, quantization modes and parallel layouts (TP, TEP: experts
over the TP group, DEP: attention data parallelism + experts over every rank, whose tables are
one DP rank's step with every rank equally loaded), and the table layout the numba
simulator reads (`pack`, evaluated by `sim_kernel.table_seconds`).

aiconfigurator answers one forward's *kernel* time (comm included); ServeFit adds each
engine's fitted per-step overheads, its own scheduler and memory model on top
(`perf.step_time`), and scales the prefill tokens' share of the non-attention ops by the
engine's fitted prefill scale at the deployment's TP (`EngineParams.prefill_scale`: the
published single-GPU vLLM runs prefilled at less than half the tables' speed, the 8-GPU
ones at about theirs). Prefill attention is a fixed part once per step plus a
per-token rate measured on batched prompts, as aiconfigurator's own batched prefill costs it.
Its calls cost ~30 µs and a missing table raises only at the first query, so a cell is built
once, at deployment time, into a table on fixed grids (that build is the probe: any failure →
None → the roofline for that cell, never a crash later), and cached per cell. aiconfigurator
is imported only here, only when this provider is used.

Quantization is set explicitly from ServeFit's memory plan (aiconfigurator's default follows
the HF config, not what the engine runs). A model named by one of its bundled HF ids (a
catalog model through `MODELS`, or one `catalog.get_model` read from that bundled config) is
its bundled config; one its SDK does not list as pre-downloaded (Mixtral-8x7B-v0.1) is
handed to it as a local folder of those files, so nothing is fetched from the Hub. Dense
models it does not bundle (Qwen3-14B, a user's own config.json) are built from a config.json
synthesized from the ModelSpec's shapes when their block is Llama-style
(`synthesized_config`). One table per
(GPU, engine, model, tp, dp, ep, weight format, KV format) at the backend's `current` version
(trtllm 1.3, vLLM 0.24, SGLang 0.5.14 on Hopper/Blackwell; older ones on A100).
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recommender.catalog.specs import ModelSpec
from recommender.model.steptime import StepCell

# ServeFit GPU → aiconfigurator system (systems/*.yaml). Not listed (MI300X, A10G, A100-40GB,
# L4 without engine tables): not covered.
SYSTEMS = {
    "H100-SXM": "h100_sxm", "H100-PCIe": "h100_pcie", "H200": "h200_sxm", "B200": "b200_sxm",
    "A100-80GB": "a100_sxm", "L40S": "l40s",
}
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
# ServeFit model → aiconfigurator model path (model_configs/ bundled): the same architecture
# and shapes (Llama-3.3-70B is Llama-3.1-70B's architecture; instruct = base shapes).
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "deepseek-ai/DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-R1",
}
# Dense model types whose shapes aiconfigurator's LLAMA family models (a Llama-style block:
# GQA attention + gated MLP), for models it does not bundle (Qwen3-14B, Qwen2.5, Mistral, a
# user's own config.json): a config.json is written from the ModelSpec (`synthesized_config`).
DENSE_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
}
SYNTH_PREFIX = "config:"  # a model reference that is a synthesized config.json (JSON text)
# memory plan's weight format → (GEMM quant mode, MoE quant mode) aiconfigurator runs.
WEIGHT_MODES = {
    "bf16": ("bfloat16", "bfloat16"), "fp16": ("bfloat16", "bfloat16"),
    "fp8": ("fp8", "fp8"), "int8": ("int8_wo", "bfloat16"),
    "int4": ("int4_wo", "int4_wo"), "awq": ("int4_wo", "int4_wo"), "gptq": ("int4_wo", "int4_wo"),
    "nvfp4": ("nvfp4", "nvfp4"), "mxfp4": ("bfloat16", "w4a16_mxfp4"),
}
# Families whose FP8 checkpoints are block-scaled (128x128 weight blocks): DeepSeek-V3/R1's
# native weights and Qwen3's official -FP8 releases ("fine-grained fp8, block size 128").
# Their GEMMs and MoE run aiconfigurator's fp8_block kernels, not per-tensor fp8 (measured
# tables differ up to 2x: Qwen3-235B-A22B MoE at TP4, 256 decodes, 121 vs 57 ms on vLLM).
FP8_BLOCK_FAMILIES = frozenset({"deepseek_v3", "qwen3", "qwen3_moe"})
# FP8 weights on a GPU without FP8 tensor cores (Ampere) run weight-only: vLLM and SGLang
# dequantize them in Marlin's W8A16 GEMMs, TensorRT-LLM refuses FP8 GEMMs there. The math is
# bf16, so the bf16 tables price it; they read 2-byte weights where Marlin reads 1, so a
# batch small enough to be weight-bandwidth bound comes out slower than it runs (up to ~2x at
# one sequence), from tens of sequences on within a few percent (the GEMMs compute-bound).
WEIGHT_ONLY_FP8_MODES = ("bfloat16", "bfloat16")
KV_MODES = {"bf16": "bfloat16", "fp8": "fp8"}
VERSION = "current"  # systems/query_versions.yaml: each backend's newest full collection

# Table grids: tokens of a forward (shared ops), prompt length for prefill attention per
# token, decode queries x their mean context. Powers of two: a forward's cost is smooth in
# each, and piecewise-linear between nodes stays within a few % (tests check the nodes).
TOKENS = 2.0 ** np.arange(0, 16)  # 1 .. 32768
PROMPT = 2.0 ** np.arange(4, 18)  # 16 .. 131072
# Prefill attention is measured on a batch of this many tokens cut into prompts of each
# length (one prompt where longer), so its fixed part (launches, ~1 ms for Llama-8B) is
# separated from the per-token part and charged once per step, not once per prompt token.
PREFILL_BATCH_TOKENS = 8192
DECODES = 2.0 ** np.arange(0, 11)  # 1 .. 1024
CONTEXT = 2.0 ** np.arange(4, 18)  # 16 .. 131072


def pack(tokens: tuple[np.ndarray, np.ndarray], prompt: tuple[np.ndarray, np.ndarray],
         decodes: np.ndarray, context: np.ndarray, grid: np.ndarray, *,
         prefill_fixed_s: float = 0.0) -> np.ndarray:
    """One float64 array in seconds, the layout `sim_kernel.table_seconds` reads:
    [n_tokens, n_prompt, n_decodes, n_context, prefill attention fixed seconds, token nodes,
    shared seconds, prompt nodes, prefill attention seconds per token beyond the fixed part,
    decode nodes, context nodes, decode attention seconds (n_decodes x n_context,
    row-major)]."""
    sizes = [len(tokens[0]), len(prompt[0]), len(decodes), len(context), prefill_fixed_s]
    return np.concatenate([np.array(sizes, float), tokens[0], tokens[1], prompt[0], prompt[1],
                           decodes, context, grid.ravel()]).astype(np.float64)


@dataclass(slots=True, frozen=True)
class MeasuredKernels:
    """One covered cell's kernel time from aiconfigurator's tables (`steptime.KernelModel`)."""

    cell_key: tuple[str, ...]  # (system, backend, model path, tp, dp, ep, gemm, moe, kv)
    packed: np.ndarray
    kind: str = "measured"

    def table(self) -> np.ndarray:
        """The packed table (`pack`) the simulator's loop evaluates."""
        return self.packed


def synthesized_config(model: ModelSpec) -> dict[str, Any] | None:
    """A Hugging Face config.json for a dense model aiconfigurator does not bundle, from the
    ModelSpec's shapes; None for MoE, MLA or windowed attention (shapes its LLAMA family
    would get wrong)."""
    arch = DENSE_ARCHITECTURES.get(model.model_type)
    if arch is None or model.is_moe or model.attention != "gqa" or model.attention_window:
        return None
    return {
        "architectures": [arch], "model_type": model.model_type,
        "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads, "head_dim": model.head_dim,
        "intermediate_size": model.intermediate_size, "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_context_tokens,
        "tie_word_embeddings": model.tie_word_embeddings, "torch_dtype": "bfloat16",
        "hidden_act": "silu", "rms_norm_eps": 1e-6,
    }


def model_reference(model: ModelSpec) -> str | None:
    """aiconfigurator's bundled model path for `model` (`MODELS`, else the bundled config of
    that HF id), else a synthesized config (`SYNTH_PREFIX` + JSON), else None (not covered)."""
    if model.name in MODELS:
        return MODELS[model.name]
    from recommender.catalog.lookup import find_bundled

    bundled = find_bundled(model.name)
    if bundled is not None and bundled.hf_id == model.name:  # the id itself, not a short name
        return bundled.hf_id
    config = synthesized_config(model)
    return SYNTH_PREFIX + json.dumps(config, sort_keys=True) if config is not None else None


@functools.lru_cache(maxsize=1024)
def _config_dir(reference: str) -> str:
    """A directory holding the synthesized config.json (aiconfigurator reads a local model
    path as a directory); one per process and config, removed at exit."""
    directory = tempfile.mkdtemp(prefix="servefit-aic-")
    atexit.register(shutil.rmtree, directory, True)
    (Path(directory) / "config.json").write_text(reference.removeprefix(SYNTH_PREFIX))
    return directory


@functools.lru_cache(maxsize=1024)
def _bundled_dir(hf_id: str) -> str | None:
    """A folder holding the bundled config (and ModelOpt quant config) of `hf_id` as
    config.json / hf_quant_config.json, for an id aiconfigurator's SDK would otherwise fetch
    from the Hub; None for an id it is not bundled under. One per process, removed at exit."""
    from recommender.catalog.lookup import find_bundled

    bundled = find_bundled(hf_id)
    if bundled is None:
        return None
    directory = tempfile.mkdtemp(prefix="servefit-aic-")
    atexit.register(shutil.rmtree, directory, True)
    shutil.copyfile(bundled.config, Path(directory) / "config.json")
    if bundled.quant is not None:
        shutil.copyfile(bundled.quant, Path(directory) / "hf_quant_config.json")
    return directory


def cell_key(cell: StepCell) -> tuple[str, ...] | None:
    """(system, backend, model reference, tp, dp, ep, gemm, moe, kv) of `cell`, None when a
    name has no aiconfigurator counterpart."""
    system, backend = SYSTEMS.get(cell.gpu.name), BACKENDS.get(cell.engine)
    path = model_reference(cell.model)
    modes, kv = WEIGHT_MODES.get(cell.weights_format), KV_MODES.get(cell.kv_cache_dtype)
    if cell.weights_format == "fp8" and cell.gpu.fp8_dense_tflops is None:
        modes = WEIGHT_ONLY_FP8_MODES  # no FP8 tensor cores: weight-only, whatever the scaling
    elif cell.weights_format == "fp8" and cell.model.model_type in FP8_BLOCK_FAMILIES:
        modes = ("fp8_block", "fp8_block")
    if None in (system, backend, path, modes, kv):
        return None
    assert system and backend and path and modes and kv
    return (system, backend, path, str(cell.tp), str(cell.dp), str(cell.ep), modes[0],
            modes[1], kv)


def handle(key: tuple[str, ...]) -> Any:  # aiconfigurator's EngineHandle
    """aiconfigurator's compiled engine for `key` (quantization set explicitly).

    Raises:
        ImportError: aiconfigurator-core is not installed.
        Exception: whatever aiconfigurator raises for a configuration it cannot build.
    """
    from aiconfigurator_core.sdk import EngineHandle
    from aiconfigurator_core.sdk.common import DefaultHFModels

    system, backend, path, tp, dp, ep, gemm, moe, kv = key
    if path.startswith(SYNTH_PREFIX):
        path = _config_dir(path)
    elif path not in DefaultHFModels:  # bundled, but its SDK would download it: a local copy
        path = _bundled_dir(path) or path
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    ranks = int(tp) * int(dp)  # MoE: experts over every GPU of the instance, by TP or EP
    return EngineHandle.compile(
        path, system, backend, backend_version=VERSION, tp_size=int(tp),
        attention_dp_size=int(dp), moe_tp_size=ranks // int(ep), moe_ep_size=int(ep),
        gemm_quant_mode=gemm, moe_quant_mode=moe, kvcache_quant_mode=kv,
        fmha_quant_mode="bfloat16")


def _build(key: tuple[str, ...]) -> np.ndarray:
    """The cell's table from `mixed_step_breakdown` → (total, shared, prefill attention,
    decode attention) ms: shared ops of a T-token prefill; prefill attention as a fixed part
    (one shortest prompt) + seconds per token of prompts of length L, measured on a batch of
    max(L, PREFILL_BATCH_TOKENS) tokens (aiconfigurator's batched prefill is within ~10 % of
    fixed + tokens x that rate from 16 to 32 K tokens); decode attention of D sequences at
    context C (beside one prefill token, whose share is negligible)."""
    h = handle(key)
    ms = 1e-3
    shared = np.array([h.mixed_step_breakdown(int(t), 0, int(t), 2, 0)[1] for t in TOKENS])
    fixed = h.mixed_step_breakdown(int(PROMPT[0]), 0, int(PROMPT[0]), 2, 0)[2]
    batch = np.maximum(PROMPT, PREFILL_BATCH_TOKENS)
    attn = np.array([(h.mixed_step_breakdown(int(b), 0, int(n), 2, 0)[2] - fixed) / b
                     for n, b in zip(PROMPT, batch, strict=True)])
    grid = np.array([[h.mixed_step_breakdown(1, int(d), int(c), 2, 0)[3] for c in CONTEXT]
                     for d in DECODES])
    # NaN fails every comparison: an unusable attention time falls back, as before the split
    if not (np.all(np.isfinite(grid)) and np.all(shared > 0) and fixed >= 0
            and np.all(np.isfinite(attn))):
        raise ValueError(f"aiconfigurator returned unusable times for {key}")
    return pack((TOKENS, shared * ms), (PROMPT, np.maximum(attn, 0.0) * ms), DECODES, CONTEXT,
                grid * ms, prefill_fixed_s=fixed * ms)


@functools.lru_cache(maxsize=1024)
def _cached(key: tuple[str, ...]) -> MeasuredKernels | None:
    # Sized for every cell of the published rows (~150, a few KB each): a smaller cache
    # thrashes in the fit, which prices all rows per residual and rebuilds evicted cells.
    try:
        table = _stored_or_built(key)
    except Exception:  # any build/probe failure means "not covered": the roofline
        return None
    return None if table is None else MeasuredKernels(key, table)


# Built tables are kept on disk: a build is ~200 aiconfigurator calls (~0.4 s a cell, half of
# a `recommend` of the bundled sample), the same in every process. SERVEFIT_CACHE_DIR names
# the folder ("" turns the cache off); by default the user's cache folder.
CACHE_ENV = "SERVEFIT_CACHE_DIR"
TABLE_FORMAT = 1  # bump when `_build` changes what a table holds
UNCOVERED = ".uncovered"  # beside a table's name: the build failed; holds the error


def cache_dir() -> Path | None:
    """Where built tables are kept: $SERVEFIT_CACHE_DIR, else $XDG_CACHE_HOME/servefit or
    ~/.cache/servefit; None when the variable is set empty."""
    import os

    if CACHE_ENV in os.environ:
        return Path(os.environ[CACHE_ENV]) if os.environ[CACHE_ENV] else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home (a container user without a passwd entry): no cache
            return None
    return Path(base) / "servefit"


def _table_path(key: tuple[str, ...]) -> Path | None:
    import hashlib
    from importlib.metadata import version

    folder = cache_dir()
    if folder is None:
        return None
    grid = [TOKENS, PROMPT, DECODES, CONTEXT, np.array([PREFILL_BATCH_TOKENS])]
    digest = hashlib.sha256(json.dumps(
        [TABLE_FORMAT, version("aiconfigurator-core"), VERSION, list(key),
         [g.tolist() for g in grid]]).encode()).hexdigest()[:32]
    return folder / "aic-tables" / f"{digest}.npy"


# Failures of the machine, not answers about the cell: never kept as "not covered".
TRANSIENT = (OSError, MemoryError, ImportError, RecursionError)


def _stored_or_built(key: tuple[str, ...]) -> np.ndarray | None:
    """The cell's table from the cache folder, else built and stored there (a folder that
    cannot be written, or a damaged file, only costs the build). None: aiconfigurator has
    no usable data for the cell, which is kept too (a failed build costs as much as a good
    one, ~1.5 s, and an uncovered MoE cell was rebuilt by every `recommend`).

    Raises:
        OSError, MemoryError, ImportError, RecursionError: a build that failed for want of
            the machine's resources or the package, not for the cell.
    """
    path = _table_path(key)
    if path is not None and path.with_suffix(UNCOVERED).is_file():
        return None
    if path is not None and path.is_file():
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            pass
    try:
        table = _build(key)
    except TRANSIENT:
        raise
    except Exception as exc:  # aiconfigurator's own errors: PerfDataNotAvailableError, ...
        if path is not None:
            _store(path.with_suffix(UNCOVERED), f"{type(exc).__name__}: {exc}\n".encode())
        return None
    if path is not None:
        buffer = io.BytesIO()
        np.save(buffer, table, allow_pickle=False)
        _store(path, buffer.getvalue())
    return table


def _store(path: Path, data: bytes) -> None:
    from core.atomic import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    except OSError:
        pass


def measured_kernels(cell: StepCell) -> MeasuredKernels | None:
    """Provider factory of kind "measured" (`steptime.PROVIDERS`): the cell's tables, built
    once per cell and cached; None (→ the roofline) when aiconfigurator is not installed or
    has no table for the GPU, engine, model or quantization."""
    key = cell_key(cell)
    return _cached(key) if key is not None else None


__all__ = ["BACKENDS", "DENSE_ARCHITECTURES", "FP8_BLOCK_FAMILIES", "MODELS", "SYSTEMS",
           "VERSION", "WEIGHT_MODES", "MeasuredKernels", "cell_key", "handle",
           "measured_kernels", "model_reference", "pack", "synthesized_config"]
