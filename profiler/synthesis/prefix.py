"""Prefix-chained block hashes for `profiler.synthesis.synth`: each request's leading run
shared with a pool or session chain, the shared fraction searched to meet the profile's
infinite-cache reuse, and the hashing (DESIGN §2.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler.schema import Profile

DEFAULT_BLOCK_SIZE = 16
POOL_CHAINS = 512  # shared system-prompt chains, drawn with Zipf popularity
POOL_ZIPF_A = 0.8

_POOL_TAG, _SESSION_TAG, _UNIQUE_TAG, _ROOT_TAG = (t << 60 for t in (1, 2, 3, 4))


@dataclass(slots=True)
class Plan:
    """One chunk of requests (request ids first_id ..): `profiler.synthesis.synth` draws its
    columns, `attach` fills its block hashes."""

    first_id: int
    arrival_s: Any
    input_tokens: Any
    output_tokens: Any
    session: Any | None = None  # int64 session ids
    multi: Any | None = None  # requests of multi-turn sessions
    hash_offsets: Any | None = None
    hash_values: Any | None = None


@dataclass(slots=True)
class Prefix:
    block_size: int
    target: float


def prefix_setup(profile: Profile) -> Prefix | None:
    if profile.prefix_reuse_infinite is None:
        return None
    return Prefix(block_size=int(profile.format.block_size or DEFAULT_BLOCK_SIZE),
                  target=float(profile.prefix_reuse_infinite))


@dataclass(slots=True)
class Chains:
    """Per request of the whole trace: blocks, chains, and the search state for `share`."""

    n_blocks: Any
    pool: Any  # shared system-prompt chain of the request (its session's, for sessions)
    jitter: Any  # uniform [0, 1): randomized rounding of share * n_blocks
    follow: Any  # a later turn of a multi-turn session
    first: Any  # index of the first request of the request's session (itself if single)
    by_pool: Any  # request order sorted by pool chain (stable)
    by_session: Any  # multi-turn requests sorted by their session's first request (stable)


def build_chains(plans: list[Plan], block_size: int, rng: Any) -> Chains:
    import numpy as np

    inp = np.concatenate([p.input_tokens for p in plans]).astype(np.int64)
    n_blocks = (inp + block_size - 1) // block_size
    n = len(n_blocks)
    weights = 1.0 / np.arange(1, POOL_CHAINS + 1) ** POOL_ZIPF_A
    pool = np.searchsorted(np.cumsum(weights) / weights.sum(), rng.random(n), side="right")
    pool = np.minimum(pool, POOL_CHAINS - 1)
    jitter = rng.random(n)
    first = np.arange(n)
    follow = np.zeros(n, dtype=bool)
    by_session = np.zeros(0, dtype=np.int64)
    if plans[0].multi is not None:
        session = np.concatenate([p.session for p in plans])
        multi = np.concatenate([p.multi for p in plans])
        _, first_of, inverse = np.unique(session, return_index=True, return_inverse=True)
        first = first_of[inverse]
        follow = multi & (first != np.arange(n))
        pool = pool[first]
        where = np.flatnonzero(multi)
        by_session = where[np.argsort(first[where], kind="stable")]
    return Chains(n_blocks, pool, jitter, follow, first,
                  np.argsort(pool, kind="stable"), by_session)


def shared_runs(chains: Chains, share: float) -> tuple[Any, Any]:
    """(k, covered): leading blocks shared with a chain, and how many of them are the pool's."""
    import numpy as np

    k = np.minimum(np.floor(share * chains.n_blocks + chains.jitter), chains.n_blocks)
    k = k.astype(np.int64)
    covered = np.where(chains.follow, np.minimum(k, k[chains.first]), k)
    return k, covered


def _reuse(chains: Chains, share: float) -> float:
    """Infinite-cache reuse of the blocks `attach` writes for this share (DESIGN §2.2)."""
    import numpy as np

    k, covered = shared_runs(chains, share)
    seen = np.minimum(covered, _prev_max(covered, chains.by_pool, chains.pool)).sum()
    if len(chains.by_session):
        idx = chains.by_session
        own = k[chains.first[idx]]  # the session's own blocks start after its first turn's run
        prior = _prev_max(k, idx, chains.first)[idx]
        seen += np.maximum(np.minimum(k[idx], prior) - own, 0)[chains.follow[idx]].sum()
    total = chains.n_blocks.sum()
    return float(seen / total) if total else 0.0


def _prev_max(values: Any, order: Any, group: Any) -> Any:
    """Per request, the max of `values` over earlier requests of its group (0 if none).

    `order` lists requests sorted by group, ties in request order; the result is indexed by
    request (entries outside `order` are 0).
    """
    import numpy as np

    big = np.int64(1 << 32)
    g = group[order].astype(np.int64)
    running = np.maximum.accumulate(g * big + values[order])
    prior = np.concatenate([[-1], running[:-1]]) - g * big
    out = np.zeros(len(values), dtype=np.int64)
    out[order] = np.maximum(prior, 0)
    return out


def search_share(chains: Chains, target: float) -> tuple[float, float]:
    """The shared fraction whose reuse is nearest `target` (reuse grows with it)."""
    lo, hi = 0.0, 1.0
    if _reuse(chains, hi) <= target:
        return hi, _reuse(chains, hi)
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _reuse(chains, mid) < target else (lo, mid)
    best = min((lo, hi), key=lambda s: abs(_reuse(chains, s) - target))
    return best, _reuse(chains, best)


def _mix(x: Any) -> Any:
    """splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    import numpy as np

    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _tagged(tag: int, keys: Any) -> Any:
    import numpy as np

    return _mix(keys.astype(np.uint64) | np.uint64(tag))


def attach(
    plan: Plan, chains: Chains, *, k: Any, covered: Any, part: slice, seed: int
) -> None:
    """Block hashes for the requests of `plan` (trace-wide arrays sliced by `part`).

    Block i's identity is its pool chain's (i < covered), its session's (i < k) or the
    request's own; its hash mixes block i - 1's hash with that identity.
    """
    import numpy as np

    nb, k, covered = chains.n_blocks[part], k[part], covered[part]
    offsets = np.concatenate([[0], np.cumsum(nb)])
    owner = np.repeat(np.arange(len(nb)), nb)
    pos = np.arange(offsets[-1]) - offsets[owner]
    sess = chains.first[part]
    rid = np.arange(part.start, part.stop)
    ident = np.where(
        pos < covered[owner], _tagged(_POOL_TAG, chains.pool[part])[owner],
        np.where(pos < k[owner], _tagged(_SESSION_TAG, sess)[owner],
                 _tagged(_UNIQUE_TAG, rid)[owner]),
    )
    hashes = np.empty(offsets[-1], dtype=np.uint64)
    root = _mix(np.array([(seed & ((1 << 56) - 1)) | _ROOT_TAG], dtype=np.uint64))[0]
    by_len = np.argsort(nb, kind="stable")
    sorted_nb = nb[by_len]
    for p in range(int(sorted_nb[-1]) if len(nb) else 0):
        alive = by_len[np.searchsorted(sorted_nb, p, side="right"):]
        idx = offsets[alive] + p
        prev = hashes[idx - 1] if p else root
        hashes[idx] = _mix(prev ^ ident[idx])
    plan.hash_offsets, plan.hash_values = offsets, hashes
