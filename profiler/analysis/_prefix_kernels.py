"""numba kernels behind `profiler.analysis.prefix`; import this module only lazily.

Importing it imports numba (about half a second); the first call of each kernel compiles it
or loads it from numba's on-disk cache (``cache=True``, in ``__pycache__`` beside this file).
`profiler.analysis.prefix` owns the semantics, the input validation, the memory allocation and the
public API; these functions trust their inputs.

The caller allocates every large array with numpy rather than inside the kernels: numpy
advises the kernel to back big allocations with transparent huge pages, and the hash table
and LRU links are accessed at random, so 4 KiB pages would cost a TLB miss and a page fault
per touch. On a 30 M-block trace that was the difference between ~3 s and ~1 s.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# How many blocks ahead to prefetch. The per-block work is a dependent chain of branches on
# cache-missing loads, so the CPU cannot overlap the misses on its own; ~16 ahead covers
# DRAM latency (measured on bench/lru_speed.py's workload: 16 beat 0, 4 and 8).
PREFETCH_DISTANCE = 16


@intrinsic
def _prefetch(typingctx, array, index):
    """Hint the CPU to load ``array[index]`` into cache (LLVM's llvm.prefetch; no fault)."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]])
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        # ".p0" is the opaque-pointer mangling of the LLVM that llvmlite 0.50 bundles.
        fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0")
        # read (0), keep in all cache levels (3), data cache (1)
        builder.call(fn, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen


@numba.njit(cache=True, nogil=True)
def _mix(key):
    # splitmix64 finaliser. Block ids are often small sequential integers (Mooncake), so the
    # table slot must come from a well-mixed key, not from the key's low bits.
    x = key ^ (key >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def dense_ids(hashes, offsets, table, ids, state):
    """Map hashes to dense int32 ids in first-appearance order, resumably.

    ``table`` is an open-addressing hash table of ``len(table) // 2`` slots (a power of two),
    each ``[key, id + 1]`` interleaved so a probe touches one cache line; 0 marks an empty
    slot. ``state`` is int64 ``[next request, distinct hashes so far, blocks so far whose
    hash appeared in an earlier request]``, all 0 at the start and updated in place.
    Processes requests from ``state[0]`` and stops before any request that could push the
    load factor above 1/2, so the caller can grow the table (see `rehash`) and resume; when
    done, ``state[0]`` is the number of requests.
    """
    n = hashes.shape[0]
    size = table.shape[0] // 2
    # Slots are int64: numba turns int64 (op) uint64 into float64, which cannot index.
    mask = size - 1
    n_requests = offsets.shape[0] - 1
    n_unique = state[1]
    n_reused = state[2]
    for r in range(state[0], n_requests):
        start = offsets[r]
        stop = offsets[r + 1]
        if 2 * (n_unique + stop - start) > size:
            state[0] = r
            state[1] = n_unique
            state[2] = n_reused
            return
        # Ids are handed out in first-appearance order, so a hash was seen in an earlier
        # request exactly when its id is below the count of ids at the request's start.
        seen_before = n_unique
        for j in range(start, stop):
            ahead = j + PREFETCH_DISTANCE
            if ahead < n:
                _prefetch(table, 2 * np.int64(_mix(hashes[ahead]) & np.uint64(mask)))
            key = hashes[j]
            slot = np.int64(_mix(key) & np.uint64(mask))
            while True:
                stored = table[2 * slot + 1]
                if stored == 0:
                    table[2 * slot] = key
                    table[2 * slot + 1] = np.uint64(n_unique + 1)
                    ident = n_unique
                    n_unique += 1
                    break
                if table[2 * slot] == key:
                    ident = np.int64(stored) - 1
                    break
                slot = (slot + 1) & mask
            ids[j] = ident
            if ident < seen_before:
                n_reused += 1
    state[0] = n_requests
    state[1] = n_unique
    state[2] = n_reused


@numba.njit(cache=True, nogil=True)
def rehash(old, new):
    """Move every entry of hash table ``old`` into the empty, larger table ``new``."""
    mask = new.shape[0] // 2 - 1
    for k in range(old.shape[0] // 2):
        if old[2 * k + 1] != 0:
            slot = np.int64(_mix(old[2 * k]) & np.uint64(mask))
            while new[2 * slot + 1] != 0:
                slot = (slot + 1) & mask
            new[2 * slot] = old[2 * k]
            new[2 * slot + 1] = old[2 * k + 1]


@numba.njit(cache=True, nogil=True)
def lru_hits(ids, offsets, link, capacity):
    """Count LRU prefix-cache hits over dense ids; `profiler.analysis.prefix.lru_hit_ratio` has the
    semantics.

    ``link`` holds ``2 * (n_unique + 1)`` int32, all -1 on entry: a circular doubly linked
    list over ids with a sentinel node ``n_unique``; ``link[2x]`` is the previous (more
    recently used) node, ``link[2x + 1]`` the next one, interleaved for locality. A prev of
    -1 means "not cached", so no separate flag array is needed. ``capacity`` must be at
    least 1.
    """
    n = ids.shape[0]
    head = link.shape[0] // 2 - 1
    link[2 * head] = head
    link[2 * head + 1] = head
    size = 0
    hits = 0
    for r in range(offsets.shape[0] - 1):
        start = offsets[r]
        stop = offsets[r + 1]
        # Only the leading run of cached blocks is reusable: a block's KV depends on the
        # whole prefix, so the engine stops matching at the first miss.
        for j in range(start, stop):
            if link[2 * ids[j]] < 0:
                break
            hits += 1
        # Insert / refresh last block first, so the request's first block ends up most
        # recently used and a prefix is evicted after its tail, never before.
        for j in range(stop - 1, start - 1, -1):
            ahead = j + PREFETCH_DISTANCE
            if ahead < n:
                _prefetch(link, 2 * np.int64(ids[ahead]))
            x = ids[j]
            if link[2 * x] >= 0:
                if link[2 * head + 1] == x:
                    continue
                p = link[2 * x]
                q = link[2 * x + 1]
                link[2 * p + 1] = q
                link[2 * q] = p
            elif size == capacity:
                victim = link[2 * head]
                p = link[2 * victim]
                link[2 * p + 1] = head
                link[2 * head] = p
                link[2 * victim] = -1
            else:
                size += 1
            first = link[2 * head + 1]
            link[2 * x] = head
            link[2 * x + 1] = first
            link[2 * first] = x
            link[2 * head + 1] = x
    return hits
