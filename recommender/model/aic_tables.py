"""One cell's table from aiconfigurator-core: its compiled engine (`handle`), the grids a
table is measured on, the build (`build_table`) and the packed layout the numba simulator reads
(`pack`, evaluated by `kernel.step_time.table_seconds`).

One table per (GPU, engine, model, tp, dp, ep, weight format, KV format) at the backend's
`current` version (trtllm 1.3, vLLM 0.24, SGLang 0.5.14 on Hopper/Blackwell; older ones on
A100); a DEP table is one DP rank's step with every rank equally loaded. Prefill attention is
a fixed part once per step plus a per-token rate measured on batched prompts, as
aiconfigurator's own batched prefill costs it. A model its SDK does not list as
pre-downloaded (Mixtral-8x7B-v0.1) is handed to it as a local folder of its bundled files, and
a synthesized config as a folder holding that config.json, so nothing is fetched from the Hub.
aiconfigurator is imported only inside `handle`. Which cell a key names is `aic_cells`'s;
caching the built tables is the provider's (`steptime_aic`).
"""

from __future__ import annotations

import atexit
import functools
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from recommender.model.aic_cells import SYNTH_PREFIX

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
    """One float64 array in seconds, the layout `kernel.step_time.table_seconds` reads:
    [n_tokens, n_prompt, n_decodes, n_context, prefill attention fixed seconds, token nodes,
    shared seconds, prompt nodes, prefill attention seconds per token beyond the fixed part,
    decode nodes, context nodes, decode attention seconds (n_decodes x n_context,
    row-major)]."""
    sizes = [len(tokens[0]), len(prompt[0]), len(decodes), len(context), prefill_fixed_s]
    return np.concatenate([np.array(sizes, float), tokens[0], tokens[1], prompt[0], prompt[1],
                           decodes, context, grid.ravel()]).astype(np.float64)


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
    from recommender.catalog.bundled import find_bundled

    bundled = find_bundled(hf_id)
    if bundled is None:
        return None
    directory = tempfile.mkdtemp(prefix="servefit-aic-")
    atexit.register(shutil.rmtree, directory, True)
    shutil.copyfile(bundled.config, Path(directory) / "config.json")
    if bundled.quant is not None:
        shutil.copyfile(bundled.quant, Path(directory) / "hf_quant_config.json")
    return directory


# aiconfigurator's Rust core loads a system's measured tables for a backend on an engine's
# first query (~0.3-1 s) and frees them with the last engine that holds them: a table built
# after the previous cell's engine was dropped loads them again. One engine per (system,
# backend) is held for the life of the process, so each pair loads once (~25 MB a pair: 0.4 GB
# for 15 pairs, as a calibration fit over every GPU builds; bench/table_build_speed.py).
_HELD: dict[tuple[str, str], Any] = {}


def release_engines() -> None:
    """Let go of the held engines, and so of the measured tables only they keep loaded (a
    process done with aiconfigurator; the table-build benchmark's baseline)."""
    _HELD.clear()


def handle(key: tuple[str, ...]) -> Any:  # aiconfigurator's EngineHandle
    """aiconfigurator's compiled engine for `key` (quantization set explicitly); the latest
    one of its (system, backend) is held so that their measured tables stay loaded.

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
    engine = EngineHandle.compile(
        path, system, backend, backend_version=VERSION, tp_size=int(tp),
        attention_dp_size=int(dp), moe_tp_size=ranks // int(ep), moe_ep_size=int(ep),
        gemm_quant_mode=gemm, moe_quant_mode=moe, kvcache_quant_mode=kv,
        fmha_quant_mode="bfloat16")
    _HELD[(system, backend)] = engine
    return engine


def build_table(key: tuple[str, ...]) -> np.ndarray:
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


__all__ = ["CONTEXT", "DECODES", "PREFILL_BATCH_TOKENS", "PROMPT", "TOKENS", "VERSION",
           "build_table", "handle", "pack", "release_engines"]
