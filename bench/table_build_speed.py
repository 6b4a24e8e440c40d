"""Benchmark of building the measured step-time tables (`recommender.model.aic_tables`): seconds
to build every cell a `recommend` of gpt-oss-20b on one L40S builds (3 engines x 4 layouts x
2 KV formats, 24 cells) from aiconfigurator-core, with nothing cached on disk.

Timed two ways in the same run, each in a fresh state (no engine held):
- as `recommend` builds them: `aic_tables.handle` holds one engine per (system, backend), so
  aiconfigurator's Rust core loads a system's measured tables once;
- baseline: the held engines released after every build (`aic_tables.release_engines`), as
  before they were held, so every cell loads its system's tables again.
Prints both, their ratio and whether every table is identical both ways (the held engine must
not change a figure). Before holding, a cold `recommend` of that model spent 13.8 of its 14.7 s
building tables.

Run: .venv/bin/python bench/table_build_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recommender.model.aic_tables import build_table, release_engines  # noqa: E402

MODEL, SYSTEM = "openai/gpt-oss-20b", "l40s"
LAYOUTS = (("1", "1", "1"), ("2", "1", "1"), ("2", "1", "2"), ("1", "2", "2"))  # tp, dp, ep
CELLS = [(SYSTEM, backend, MODEL, tp, dp, ep, "bfloat16", "w4a16_mxfp4", kv)
         for backend in ("vllm", "sglang", "trtllm") for tp, dp, ep in LAYOUTS
         for kv in ("bfloat16", "fp8")]


def _built(key: tuple[str, ...]) -> np.ndarray | str:
    """The cell's table, or the error of a cell aiconfigurator lacks data for (a failed
    build is a probe `recommend` pays for too: it costs as much as a good one)."""
    try:
        return build_table(key)
    except Exception as exc:  # aiconfigurator's PerfDataNotAvailableError, ...
        return type(exc).__name__


def build_all(release_each: bool) -> tuple[float, list[np.ndarray | str]]:
    """(seconds, table or error) for every cell, from no engine held."""
    release_engines()
    start = time.perf_counter()
    tables = []
    for key in CELLS:
        tables.append(_built(key))
        if release_each:
            release_engines()
    return time.perf_counter() - start, tables


def _same(a: np.ndarray | str, b: np.ndarray | str) -> bool:
    return a == b if isinstance(a, str) or isinstance(b, str) else np.array_equal(a, b)


def main() -> None:
    _built(CELLS[0])  # imports aiconfigurator and compiles its Python side once
    held_s, held = build_all(release_each=False)
    base_s, base = build_all(release_each=True)
    same = all(_same(a, b) for a, b in zip(held, base, strict=True))
    failed = sum(isinstance(t, str) for t in held)
    print(f"{len(CELLS)} tables of {MODEL} on {SYSTEM} ({failed} cells aiconfigurator lacks "
          "data for), nothing cached on disk")
    print(f"  held engine per (system, backend): {held_s:6.2f} s")
    print(f"  baseline, released after each:     {base_s:6.2f} s")
    print(f"  ratio baseline / held: {base_s / held_s:.1f}x; tables identical: {same}")
    if not same:
        sys.exit("a held engine changed a table")


if __name__ == "__main__":
    main()
