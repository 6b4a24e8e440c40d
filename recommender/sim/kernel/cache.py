"""The KV pool and its prefix cache: free units and cached blocks, with an LRU list of the
unreferenced ones (`Cache`, scalars in the `cs` slots). Taking units (evicting the least
recently used blocks), releasing a request's blocks, caching its computed prompt blocks and
finding its cached prefix. Trusts its inputs (`recommender.sim.simulator` validates).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from recommender.sim.kernel.state import S_HELD, S_HOFF, S_NFULL, S_NTOK, S_PRIV

# Cache scalars in one int64 array: LRU head/tail, evictable count, cached entries, free units.
HEAD, TAIL, COUNT, NCACHED, FREE = 0, 1, 2, 3, 4


class Cache(NamedTuple):
    """The KV pool: free units and the prefix cache's blocks (LRU list of unreferenced ones)."""

    hid: np.ndarray  # block ids of every request's full prompt blocks, flat
    cached: np.ndarray
    ref: np.ndarray
    prev: np.ndarray
    nxt: np.ndarray
    cs: np.ndarray  # HEAD, TAIL, COUNT, NCACHED, FREE


@numba.njit(cache=True, nogil=True)
def unlink(x, prev, nxt, cs):
    p = prev[x]
    n = nxt[x]
    if p >= 0:
        nxt[p] = n
    else:
        cs[HEAD] = n
    if n >= 0:
        prev[n] = p
    else:
        cs[TAIL] = p
    prev[x] = -1
    nxt[x] = -1
    cs[COUNT] -= 1


@numba.njit(cache=True, nogil=True)
def _push(x, prev, nxt, cs):
    t = cs[TAIL]
    prev[x] = t
    nxt[x] = -1
    if t >= 0:
        nxt[t] = x
    else:
        cs[HEAD] = x
    cs[TAIL] = x
    cs[COUNT] += 1


@numba.njit(cache=True, nogil=True)
def reserve_units(need, hu, cached, prev, nxt, cs):  # noqa: PLR0917
    """Take `need` free units, evicting least recently used cached blocks; False if short."""
    if need <= 0:
        return True
    if cs[FREE] + hu * cs[COUNT] < need:
        return False
    while cs[FREE] < need:
        x = cs[HEAD]
        unlink(x, prev, nxt, cs)
        cached[x] = False
        cs[NCACHED] -= 1
        cs[FREE] += hu
    cs[FREE] -= need
    return True


@numba.njit(cache=True, nogil=True)
def release_blocks(r, S, hid, ref, prev, nxt, cs):  # noqa: PLR0917
    """Free r's private units; drop its refs on cached blocks, last block first (the prefix
    becomes the most recently used, so it outlives the tail)."""
    base = S[r, S_HOFF]
    for j in range(S[r, S_HELD] - 1, -1, -1):
        x = hid[base + j]
        ref[x] -= 1
        if ref[x] == 0:
            _push(x, prev, nxt, cs)
    S[r, S_HELD] = 0
    cs[FREE] += S[r, S_PRIV]
    S[r, S_PRIV] = 0


@numba.njit(cache=True, nogil=True)
def insert_prompt_blocks(r, upto, S, hid, cached, ref, prev, nxt, cs, hu):  # noqa: PLR0917
    """r's computed full prompt blocks held..upto-1 move from private units into the cache
    (or, if another request cached the same block meanwhile, share it and free r's copy)."""
    base = S[r, S_HOFF]
    for j in range(S[r, S_HELD], upto):
        x = hid[base + j]
        S[r, S_PRIV] -= hu
        if cached[x]:
            if ref[x] == 0:
                unlink(x, prev, nxt, cs)
            ref[x] += 1
            cs[FREE] += hu
        else:
            cached[x] = True
            ref[x] = 1
            cs[NCACHED] += 1
    S[r, S_HELD] = upto


@numba.njit(cache=True, nogil=True, inline="always")
def cached_prefix(S, hid, cached, r, hbs):
    """Leading prompt blocks of r already cached (never the whole prompt: the last token is
    always computed)."""
    h = 0
    base = S[r, S_HOFF]
    while h < S[r, S_NFULL] and cached[hid[base + h]]:
        h += 1
    while h > 0 and h * hbs >= S[r, S_NTOK]:
        h -= 1
    return h
