"""Per-request lengths of a fixed-length or dataset load: `draw`, and the datasets' length
distributions it draws from (`SHAPES`).

A published benchmark run on a dataset (e.g. `vllm bench serve --dataset-name sharegpt`)
states only the mean prompt and generated lengths; simulating every request at those means
hides what the spread does to a run: a long tail of outputs decoding at a small batch after
the rest finished (lower throughput), and short requests leaving the batch early. `draw`
samples (prompt, output) pairs, seeded, from the dataset's own distribution, scaled so the
sample's means are the stated ones. No I/O at import; each shape is read once, when first
drawn from.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from core.load import DatasetLengths, FixedLengths

CALIBRATION_DIR = Path(__file__).resolve().parents[2] / "data" / "calibration"
RANGE_GRID = 64  # points per axis of a uniform range's grid


def _stored(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        return np.loadtxt(CALIBRATION_DIR / name, delimiter=",", skiprows=1,
                          dtype=np.float64, ndmin=2)
    return load


def _uniform_range(ratio: float) -> Callable[[], np.ndarray]:
    """Prompt and output lengths independently uniform on [ratio, 1] (relative to the set
    length; `draw` scales them to the stated means), as an even grid of pairs."""
    def grid() -> np.ndarray:
        axis = np.linspace(ratio, 1.0, RANGE_GRID)
        return np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    return grid


# dataset (`core.load.Dataset`) → its (input_tokens, output_tokens) pairs, relative sizes.
# ShareGPT: data/calibration/sharegpt_lengths.csv (provenance in that folder's README.md:
# vllm bench serve's sampling rule on ShareGPT_V3's first 1,000 conversations, tokens
# approximated as characters / 4). random-range-0.8: the random dataset's bench_serving
# sampling (`randint(int(len * 0.8), len)` for the prompt and the output alike).
SHAPES: dict[str, Callable[[], np.ndarray]] = {
    "sharegpt": _stored("sharegpt_lengths.csv"),
    "random-range-0.8": _uniform_range(0.8),
}


@cache
def shape(dataset: str) -> np.ndarray:
    """The dataset's (prompt, output) length pairs, shape (n, 2), read-only."""
    pairs = SHAPES[dataset]()
    pairs.setflags(write=False)
    return pairs


def draw(lengths: FixedLengths | DatasetLengths, n: int, seed: int,
         ) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of `n` requests, int64 arrays.

    Fixed lengths: every request the same. Dataset lengths: `n` pairs drawn with replacement
    from the dataset's shape (seeded; a pair keeps its prompt/output correlation), each
    column scaled so its mean over the `n` drawn is the stated mean, rounded, at least 1 token.
    """
    isl, osl = lengths.input_tokens, lengths.output_tokens
    if isinstance(lengths, FixedLengths):
        return np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64)
    pairs = shape(lengths.dataset)
    picked = pairs[np.random.default_rng(seed).integers(0, len(pairs), size=n)]
    return _scaled(picked[:, 0], isl), _scaled(picked[:, 1], osl)


def _scaled(column: np.ndarray, mean: int) -> np.ndarray:
    """`column` × mean / its mean, rounded, ≥ 1 token."""
    return np.maximum(np.rint(column * (mean / column.mean())), 1).astype(np.int64)


__all__ = ["SHAPES", "draw", "shape"]
