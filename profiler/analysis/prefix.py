"""Prefix-cache reuse analysis over a trace's prompt blocks.

This module owns the answer to "how much of this trace's prompt could a prefix cache have
served?": the hit ratio of an LRU block cache of a given size, with the semantics of vLLM's
and SGLang's automatic prefix caching, and the upper bound an infinite cache would reach.

A trace is given flat, in arrival order:

* ``hashes`` -- ``uint64`` block hashes of all requests concatenated in request order. Hashes
  are prefix-chained (equal hash implies equal prefix up to and including that block).
* ``offsets`` -- ``int64``, length ``n_requests + 1``, starting at 0: request ``r`` owns
  ``hashes[offsets[r]:offsets[r + 1]]``. Requests may own zero blocks.

The per-block work runs in numba kernels (hash -> dense id with an open-addressing table,
then an O(1)-per-access LRU over dense ids). numba is imported lazily, the first time a
kernel is needed, because importing it costs about half a second and the CLI is timed end to
end; importing this module has no side effects.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["dense_ids", "infinite_hit_ratio", "lru_hit_ratio", "lru_hit_ratios"]

# Dense ids and linked-list links are int32 to halve the memory traffic of the kernels; a
# trace would need more than two billion blocks to overflow them.
_MAX_BLOCKS = 2**31 - 2


def _kernels() -> Any:
    """Return the numba kernel module, importing (and so compiling or cache-loading) it lazily."""
    # Kept in a separate module because numba's cache=True misses on every run for kernels
    # defined inside a function that call another jitted function: the closure cell holding
    # that dispatcher pickles differently in each process, so the cache key never matches.
    from profiler.analysis import _prefix_kernels

    return _prefix_kernels


def dense_ids(
    hashes: npt.NDArray[np.uint64], offsets: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], int, int]:
    """Return ``(ids, n_unique, n_reused)``: dense ids in first-appearance order, the number
    of distinct hashes, and the blocks whose hash appeared in an earlier request.

    The one hash -> dense id mapping of the project (the simulator uses it too). Trusts its
    input: C-contiguous ``uint64`` hashes and ``int64`` offsets in the layout of the module
    docstring, at most 2**31 - 2 blocks; zero blocks give ``(empty, 0, 0)``.
    """
    kernels = _kernels()
    n_blocks = hashes.shape[0]
    n_requests = offsets.shape[0] - 1
    # Arrays are allocated here, with numpy, so they get huge pages (see _prefix_kernels).
    # n_blocks slots hold up to n_blocks / 2 distinct hashes at load 1/2, so the table grows
    # at most once, and only for traces with little reuse.
    slots = _next_pow2(max(n_blocks, 1024))
    table = np.zeros(2 * slots, np.uint64)
    ids = np.empty(n_blocks, np.int32)
    state = np.zeros(3, np.int64)  # next request, distinct hashes, reused blocks
    while True:
        kernels.dense_ids(hashes, offsets, table, ids, state)
        r, n_unique, n_reused = (int(v) for v in state)
        if r == n_requests:
            return ids, n_unique, n_reused
        needed = n_unique + int(offsets[r + 1] - offsets[r])
        bigger = np.zeros(2 * max(2 * slots, _next_pow2(2 * needed)), np.uint64)
        kernels.rehash(table, bigger)
        table = bigger
        slots = table.shape[0] // 2


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _validate(
    hashes: npt.NDArray[np.uint64], offsets: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Check the flat trace layout and return C-contiguous views (one compiled signature)."""
    if not isinstance(hashes, np.ndarray) or hashes.dtype != np.uint64 or hashes.ndim != 1:
        raise ValueError(
            f"hashes must be a 1-D numpy array of dtype uint64, got {_describe(hashes)}"
        )
    if not isinstance(offsets, np.ndarray) or offsets.dtype != np.int64 or offsets.ndim != 1:
        raise ValueError(
            f"offsets must be a 1-D numpy array of dtype int64, got {_describe(offsets)}"
        )
    if offsets.shape[0] == 0:
        raise ValueError("offsets must have n_requests + 1 entries; got an empty array")
    if offsets[0] != 0:
        raise ValueError(f"offsets[0] must be 0, got {int(offsets[0])}")
    if offsets[-1] != hashes.shape[0]:
        raise ValueError(
            f"offsets[-1] must equal len(hashes) = {hashes.shape[0]}, got {int(offsets[-1])}"
        )
    steps = np.diff(offsets)
    if steps.size and steps.min() < 0:
        bad = int(np.argmax(steps < 0))
        raise ValueError(
            f"offsets must be non-decreasing; offsets[{bad}] = {int(offsets[bad])} > "
            f"offsets[{bad + 1}] = {int(offsets[bad + 1])}"
        )
    if hashes.shape[0] == 0:
        raise ValueError("the trace has no prompt blocks, so a hit ratio is undefined")
    if hashes.shape[0] > _MAX_BLOCKS:
        raise ValueError(f"at most {_MAX_BLOCKS} blocks are supported, got {hashes.shape[0]}")
    return np.ascontiguousarray(hashes), np.ascontiguousarray(offsets)


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.ndim}-D array of dtype {value.dtype}"
    return type(value).__name__


def _check_capacity(capacity: object) -> int:
    # bool is an Integral, but True as a capacity is surely a bug.
    if isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral):
        raise ValueError(f"capacity must be an integer number of blocks, got {capacity!r}")
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1 block, got {capacity}")
    return int(capacity)


def lru_hit_ratios(
    hashes: npt.NDArray[np.uint64],
    offsets: npt.NDArray[np.int64],
    capacities: Sequence[int],
) -> dict[int, float]:
    """Prefix-cache hit ratio of an LRU block cache, for each of several capacities.

    Same semantics as `lru_hit_ratio`; the hash -> dense-id mapping is built once and shared
    by all capacities, so this is cheaper than calling `lru_hit_ratio` per capacity.

    Args:
        hashes: ``uint64`` block hashes of all requests, concatenated in arrival order.
        offsets: ``int64``, ``n_requests + 1`` non-decreasing entries from 0 to
            ``len(hashes)``; request ``r`` owns ``hashes[offsets[r]:offsets[r + 1]]``.
        capacities: cache sizes in blocks, each at least 1.

    Returns:
        ``{capacity: hits / total blocks}``, keyed by each distinct capacity as an ``int``.

    Raises:
        ValueError: on a malformed trace layout, a capacity below 1 or a non-integer
            capacity, or a trace with no blocks at all.
    """
    checked = [_check_capacity(c) for c in capacities]
    hashes, offsets = _validate(hashes, offsets)
    ids, n_unique, _ = dense_ids(hashes, offsets)
    kernels = _kernels()
    total = hashes.shape[0]
    ratios: dict[int, float] = {}
    for capacity in checked:
        if capacity not in ratios:
            # Beyond n_unique blocks nothing is ever evicted, so clamping changes nothing
            # and keeps the capacity within the kernel's int range.
            link = np.full(2 * (n_unique + 1), -1, np.int32)
            hits = kernels.lru_hits(ids, offsets, link, min(capacity, n_unique))
            ratios[capacity] = hits / total
    return ratios


def lru_hit_ratio(
    hashes: npt.NDArray[np.uint64],
    offsets: npt.NDArray[np.int64],
    capacity_blocks: int,
) -> float:
    """Prefix-cache hit ratio of an LRU block cache (vLLM / SGLang semantics).

    Requests are replayed in order against a cache holding at most ``capacity_blocks``
    blocks, initially empty. For each request:

    1. Hits are the *leading run* of its blocks that are currently cached: matching stops at
       the first uncached block, and cached blocks after it do not count.
    2. Then all its blocks are inserted or refreshed, last block first, so its first block
       ends as the most recently used and a prefix outlives its tail. Whenever a block not
       in the cache is inserted into a full cache, the least recently used block is evicted
       first.

    Args:
        hashes: ``uint64`` block hashes of all requests, concatenated in arrival order.
        offsets: ``int64``, ``n_requests + 1`` non-decreasing entries from 0 to
            ``len(hashes)``; request ``r`` owns ``hashes[offsets[r]:offsets[r + 1]]``.
        capacity_blocks: cache size in blocks, at least 1.

    Returns:
        Total hits divided by the total number of blocks over all requests, in ``[0, 1]``.

    Raises:
        ValueError: on a malformed trace layout, a capacity below 1 or a non-integer
            capacity, or a trace with no blocks at all.
    """
    capacity = _check_capacity(capacity_blocks)
    return lru_hit_ratios(hashes, offsets, [capacity])[capacity]


def infinite_hit_ratio(
    hashes: npt.NDArray[np.uint64],
    offsets: npt.NDArray[np.int64],
) -> float:
    """Prefix reuse an unbounded cache could reach: the upper bound of `lru_hit_ratio`.

    A block counts as reused when its hash already appeared in an *earlier* request (a
    strictly lower request index); a hash repeated only within the same request does not
    count. When the hashes are truly prefix-chained, every such block lies in a cached leading
    run, so this equals the LRU hit ratio with unlimited capacity.

    Args:
        hashes: ``uint64`` block hashes of all requests, concatenated in arrival order.
        offsets: ``int64``, ``n_requests + 1`` non-decreasing entries from 0 to
            ``len(hashes)``; request ``r`` owns ``hashes[offsets[r]:offsets[r + 1]]``.

    Returns:
        Reused blocks divided by the total number of blocks, in ``[0, 1]``.

    Raises:
        ValueError: on a malformed trace layout or a trace with no blocks at all.
    """
    hashes, offsets = _validate(hashes, offsets)
    _, _, n_reused = dense_ids(hashes, offsets)
    return n_reused / hashes.shape[0]
