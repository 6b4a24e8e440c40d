"""The measured-kernel step-time provider: NVIDIA's measured per-operation tables
(aiconfigurator-core 0.12.0, Apache-2.0, CPU-only, bundled data) behind `steptime`.

Owns `measured_kernels` (the provider factory of kind "measured": a `MeasuredKernels` for a
covered cell, None otherwise) and the built tables' caches, per process and on disk. Which
aiconfigurator cell a step cell is lives in `aic_cells`; building one cell's table in
`aic_tables`.

aiconfigurator answers one forward's *kernel* time (comm included); ServeFit adds each
engine's fitted per-step overheads, its own scheduler and memory model on top
(`perf.step_time`), and scales the prefill tokens' share of the non-attention ops by the
engine's fitted prefill scale at the deployment's TP (`EngineParams.prefill_scale`: the
published single-GPU vLLM runs prefilled at less than half the tables' speed, the 8-GPU
ones at about theirs). Its calls cost ~30 µs and a missing table raises only at the first
query, so a cell is built once, at deployment time, into a table on fixed grids (that build is
the probe: any failure → None → the roofline for that cell, never a crash later), and cached
per cell. aiconfigurator is imported only when this provider is used.
"""

from __future__ import annotations

import functools
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recommender.model.aic_cells import cell_key
from recommender.model.aic_tables import (
    CONTEXT,
    DECODES,
    PREFILL_BATCH_TOKENS,
    PROMPT,
    TOKENS,
    VERSION,
    build_table,
)
from recommender.model.steptime import StepCell


@dataclass(slots=True, frozen=True)
class MeasuredKernels:
    """One covered cell's kernel time from aiconfigurator's tables (`steptime.KernelModel`)."""

    cell_key: tuple[str, ...]  # (system, backend, model path, tp, dp, ep, gemm, moe, kv)
    packed: np.ndarray
    kind: str = "measured"

    def table(self) -> np.ndarray:
        """The packed table (`aic_tables.pack`) the simulator's loop evaluates."""
        return self.packed


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
TABLE_FORMAT = 1  # bump when `aic_tables.build_table` changes what a table holds
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
        table = build_table(key)
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


__all__ = ["CACHE_ENV", "MeasuredKernels", "cache_dir", "measured_kernels"]
