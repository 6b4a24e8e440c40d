"""Benchmark of `profiler.analysis.prefix`: LRU and infinite prefix-reuse throughput in blocks/s.

Builds a seeded synthetic workload shaped like Mooncake (requests of ~24 blocks that share a
prefix drawn from a Zipf-popular pool, then unique blocks; hashes are random uint64 as real
block hashes are), times `lru_hit_ratio` and `infinite_hit_ratio` on it (hash -> id mapping
included), and compares with a straightforward pure-Python OrderedDict LRU run on a
300k-block prefix of the same workload in the same process.

Run: .venv/bin/python bench/lru_speed.py [--blocks 30000000] [--capacity 100000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.analysis import prefix
from tests.reference import lru_hits as python_lru_hits  # the tests' plain OrderedDict LRU


def make_workload(n_blocks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(hashes, offsets)`` of about ``n_blocks`` blocks, Mooncake-like."""
    rng = np.random.default_rng(seed)
    n_req = max(1, n_blocks // 24)
    lengths = 1 + rng.poisson(23, n_req)
    # Pool of shared prefixes (system prompts, conversation histories); popularity is Zipf.
    n_pool = 200_000
    pool_len = rng.integers(2, 40, n_pool)
    pool_off = np.zeros(n_pool + 1, np.int64)
    np.cumsum(pool_len, out=pool_off[1:])
    pool = rng.integers(0, 2**64, pool_off[-1], dtype=np.uint64, endpoint=False)
    rank = (rng.zipf(1.1, n_req) - 1) % n_pool
    choice = rng.permutation(n_pool)[rank]
    shared = np.minimum(pool_len[choice], lengths)
    offsets = np.zeros(n_req + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    req = np.repeat(np.arange(n_req), lengths)
    pos = np.arange(total) - offsets[:-1][req]
    is_shared = pos < shared[req]
    hashes = rng.integers(0, 2**64, total, dtype=np.uint64, endpoint=False)
    hashes[is_shared] = pool[(pool_off[:-1][choice][req] + pos)[is_shared]]
    return hashes, offsets


def best_of(repeats: int, fn, *args) -> tuple[float, object]:
    best = float("inf")
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30_000_000)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--baseline-blocks", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    start = time.perf_counter()
    hashes, offsets = make_workload(args.blocks)
    n = len(hashes)
    print(
        f"workload: {n} blocks, {len(offsets) - 1} requests, "
        f"built in {time.perf_counter() - start:.2f} s"
    )

    # First call pays numba's import plus compile (or on-disk cache load); keep it apart.
    tiny_h = np.arange(8, dtype=np.uint64)
    tiny_o = np.array([0, 4, 8], np.int64)
    start = time.perf_counter()
    prefix.lru_hit_ratio(tiny_h, tiny_o, 2)
    prefix.infinite_hit_ratio(tiny_h, tiny_o)
    warmup = time.perf_counter() - start
    kernels = prefix._kernels()
    cached = bool(kernels.dense_ids.stats.cache_hits) and bool(kernels.lru_hits.stats.cache_hits)
    print(f"jit warm-up (numba import + {'cache load' if cached else 'compile'}): {warmup:.2f} s")

    t_lru, ratio = best_of(args.repeats, prefix.lru_hit_ratio, hashes, offsets, args.capacity)
    t_inf, inf_ratio = best_of(args.repeats, prefix.infinite_hit_ratio, hashes, offsets)
    print(
        f"lru_hit_ratio capacity={args.capacity}: {ratio:.4f} in {t_lru:.3f} s = "
        f"{n / t_lru / 1e6:.1f} M blocks/s (best of {args.repeats}, id mapping included)"
    )
    print(
        f"infinite_hit_ratio: {inf_ratio:.4f} in {t_inf:.3f} s = "
        f"{n / t_inf / 1e6:.1f} M blocks/s (best of {args.repeats})"
    )

    # Baseline on the requests that fit within the first baseline-blocks blocks.
    n_base_req = int(np.searchsorted(offsets, args.baseline_blocks, side="right")) - 1
    base_o = offsets[: n_base_req + 1]
    base_h = hashes[: base_o[-1]]
    flat = base_h.tolist()
    requests = [flat[base_o[r] : base_o[r + 1]] for r in range(n_base_req)]
    start = time.perf_counter()
    base_hits = python_lru_hits(requests, args.capacity)
    t_base = time.perf_counter() - start
    n_base = len(base_h)
    t_small, ours = best_of(args.repeats, prefix.lru_hit_ratio, base_h, base_o, args.capacity)
    if abs(ours - base_hits / n_base) > 1e-12:
        raise SystemExit(f"mismatch on baseline prefix: {ours} vs {base_hits / n_base}")
    base_rate = n_base / t_base
    print(
        f"pure-Python OrderedDict LRU on {n_base} blocks: {t_base:.3f} s = "
        f"{base_rate / 1e6:.2f} M blocks/s (same hit ratio: {ours:.4f})"
    )
    print(
        f"lru_hit_ratio on the same {n_base} blocks: {n_base / t_small / 1e6:.1f} M blocks/s "
        f"= {t_base / t_small:.0f}x the baseline"
    )
    print(
        f"lru_hit_ratio on {n} blocks vs the baseline's rate: {n / t_lru / base_rate:.0f}x "
        "(the baseline's small working set stays in CPU cache, which flatters it)"
    )


if __name__ == "__main__":
    main()
