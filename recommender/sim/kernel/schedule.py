"""One step's batch: the running requests scheduled first (a block they cannot get preempts
the newest), then the waiting ones ordered by the policy (longest cached prefix) and
admitted within the budget, max_seqs and the KV the policy's reserve leaves (`batch`).
"""

from __future__ import annotations

import numba
import numpy as np

from recommender.sim.kernel.cache import (
    COUNT,
    FREE,
    cached_prefix,
    release_blocks,
    reserve_units,
    unlink,
)
from recommender.sim.kernel.queues import Q_NRUN, Q_WH, Q_WL, RUNNING, WAITING
from recommender.sim.kernel.settings import LPM_MAX_QUEUE, PREFILL_FIRST, RES_CLIP
from recommender.sim.kernel.state import (
    S_COMPUTED,
    S_HELD,
    S_HOFF,
    S_NPRE,
    S_NTOK,
    S_ODONE,
    S_OUT,
    S_PRIV,
    S_SCHED,
    S_STATUS,
)


@numba.njit(cache=True, nogil=True)
def _ceil_div(a, b):
    return -((-a) // b)


@numba.njit(cache=True, nogil=True)
def _preempt_newest(S, ca, qu):
    """Recompute preemption of the most recently admitted running request: its KV freed, it
    returns to the front of the waiting ring. Returns it."""
    q, wq = qu.q, qu.wq
    n = S.shape[0]
    q[Q_NRUN] -= 1
    v = qu.run[q[Q_NRUN]]
    release_blocks(v, S, ca.hid, ca.ref, ca.prev, ca.nxt, ca.cs)
    S[v, S_COMPUTED] = 0
    S[v, S_STATUS] = WAITING
    q[Q_WH] = (q[Q_WH] - 1) % n
    wq[q[Q_WH]] = v
    q[Q_WL] += 1
    S[v, S_NPRE] += 1
    return v


@numba.njit(cache=True, nogil=True, inline="always")
def _schedule_running(S, ca, qu, budget, chunked, u, hbs, hu, qi, clip):  # noqa: PLR0917
    """Running requests first, in admission order: each gets min(tokens left, budget left)
    (a decode 1 token, k + 1 verified with speculation); a block it needs and cannot get
    preempts the newest running request. Returns (budget left, prefill tokens, decodes,
    decode context sum, prefill context sum, prompts sampled, preemptions, the running
    requests' remaining outputs up to `clip` each)."""
    run_, q = qu.run, qu.q
    cached, prev, nxt, cs = ca.cached, ca.prev, ca.nxt, ca.cs
    pt = dn = cd = cp = sp = remaining = 0.0
    preempts = 0
    i = 0
    while i < q[Q_NRUN] and budget > 0:
        r = run_[i]
        rem = S[r, S_NTOK] - S[r, S_COMPUTED]
        k = min(rem, budget)
        if not chunked and k < rem:
            i += 1
            continue
        decode = rem == 1 and S[r, S_ODONE] > 0
        look = qi if decode else k  # a speculative decode verifies k + 1 tokens
        # ceil(x / u) - priv, clamped at 0, without a division in the common case (a decode
        # inside its last block).
        x = S[r, S_COMPUTED] + look - S[r, S_HELD] * hbs - S[r, S_PRIV] * u
        need = _ceil_div(x, u) if x > 0 else 0
        ok = True
        while need > 0 and not reserve_units(need, hu, cached, prev, nxt, cs):
            preempts += 1
            if _preempt_newest(S, ca, qu) == r:
                ok = False
                break
        if not ok:
            break
        S[r, S_PRIV] += need
        S[r, S_SCHED] = k
        budget -= look
        remaining += min(S[r, S_OUT] - S[r, S_ODONE], clip)
        if decode:
            dn += 1.0
            cd += S[r, S_COMPUTED]
        else:
            pt += k
            cp += k * (S[r, S_COMPUTED] + 0.5 * k)
            if k == rem:
                sp += 1.0
        i += 1
    return budget, pt, dn, cd, cp, sp, preempts, remaining


@numba.njit(cache=True, nogil=True)
def _order_longest_prefix(S, ca, qu, hbs):
    """Sort the waiting ring by cached prefix, longest first (stable: FCFS among equals), as
    SGLang's `lpm` schedule policy does."""
    q, wq = qu.q, qu.wq
    n = S.shape[0]
    wl = q[Q_WL]
    keys = np.empty(wl, np.int64)
    items = np.empty(wl, np.int64)
    for j in range(wl):
        r = wq[(q[Q_WH] + j) % n]
        items[j] = r
        keys[j] = -cached_prefix(S, ca.hid, ca.cached, r, hbs)
    order = np.argsort(keys, kind="mergesort")
    for j in range(wl):
        wq[(q[Q_WH] + j) % n] = items[order[j]]


@numba.njit(cache=True, nogil=True, inline="always")
def _admit(S, ca, qu, budget, settings, reserve_tokens, ratio, clip):  # noqa: PLR0917
    """Waiting requests in ring order while running < max_seqs, budget is left and the KV
    units the admission claims fit beside the policy's reserve for the running requests'
    outputs. Returns (budget left, prefill tokens, prefill context sum, prompts sampled,
    reserve tokens after the admissions)."""
    max_seqs, chunked, static, u, hbs, hu, reserve = settings
    q, wq, run_ = qu.q, qu.wq, qu.run
    hid, cached, ref, prev, nxt, cs = ca.hid, ca.cached, ca.ref, ca.prev, ca.nxt, ca.cs
    n = S.shape[0]
    pt = cp = sp = 0.0
    while q[Q_WL] > 0 and q[Q_NRUN] < max_seqs and (budget > 0 or static):
        r = wq[q[Q_WH]]
        h = cached_prefix(S, hid, cached, r, hbs)
        base = S[r, S_HOFF]
        rem = S[r, S_NTOK] - h * hbs
        k = min(rem, budget)
        if not chunked and k < rem and not (static and k == 0):
            break
        left = S[r, S_OUT] - S[r, S_ODONE]
        # units the admission claims: the first chunk's, or all the request will hold
        need = _ceil_div(rem + left - 1 if reserve else k, u)
        held_back = 0
        if ratio > 0.0:
            held_back = _ceil_div(np.int64(ratio * (reserve_tokens + min(left, clip))), u)
        in_lru = 0
        for j in range(h):
            if ref[hid[base + j]] == 0:
                in_lru += 1
        if cs[FREE] + hu * (cs[COUNT] - in_lru) < need + held_back:
            break
        for j in range(h):
            x = hid[base + j]
            if ref[x] == 0:
                unlink(x, prev, nxt, cs)
            ref[x] += 1
        reserve_units(need, hu, cached, prev, nxt, cs)
        S[r, S_PRIV] = need
        S[r, S_HELD] = h
        S[r, S_COMPUTED] = h * hbs
        q[Q_WH] = (q[Q_WH] + 1) % n
        q[Q_WL] -= 1
        run_[q[Q_NRUN]] = r
        q[Q_NRUN] += 1
        S[r, S_STATUS] = RUNNING
        S[r, S_SCHED] = k
        budget -= k
        reserve_tokens += min(left, clip)
        pt += k
        cp += k * (S[r, S_COMPUTED] + 0.5 * k)
        if k == rem:
            sp += 1.0
    return budget, pt, cp, sp, reserve_tokens


@numba.njit(cache=True, nogil=True)
def _running_reserve(S, qu, clip):
    """The running requests' remaining outputs, up to `clip` tokens each (the admission
    reserve's base, as `_schedule_running` sums it over the requests it schedules)."""
    total = 0.0
    for i in range(qu.q[Q_NRUN]):
        r = qu.run[i]
        total += min(S[r, S_OUT] - S[r, S_ODONE], clip)
    return total


@numba.njit(cache=True, nogil=True, inline="always")
def batch(S, ca, qu, budget_cap, admit, qi, pcfg, ratio):  # noqa: PLR0917
    """This step's batch: the running requests scheduled, then (if none was preempted) the
    waiting ones ordered by the policy and admitted; under a prefill-first policy, a step
    that can admit waiting prompts runs only them. Returns (prefill tokens, decodes, decode
    context sum, prefill context sum, prompts sampled, preemptions)."""
    _, chunked, static, u, hbs, hu, _ = admit
    q = qu.q
    clip = np.int64(pcfg[RES_CLIP])
    if pcfg[PREFILL_FIRST] > 0.0 and q[Q_WL] > 0 and not static:
        resv = _running_reserve(S, qu, clip) if ratio > 0.0 else 0.0
        _, pt, cp, sp, _ = _admit(S, ca, qu, budget_cap, admit, resv, ratio, clip)
        if pt > 0.0:
            return pt, 0.0, 0.0, cp, sp, 0
    budget, pt, dn, cd, cp, sp, pre, resv = _schedule_running(
        S, ca, qu, budget_cap, chunked, u, hbs, hu, qi, clip)
    if pre == 0 and pcfg[LPM_MAX_QUEUE] > 0 and 1 < q[Q_WL] <= pcfg[LPM_MAX_QUEUE] and hbs > 0:
        _order_longest_prefix(S, ca, qu, hbs)
    if pre == 0 and q[Q_WL] > 0 and (not static or q[Q_NRUN] == 0):
        budget, a_pt, a_cp, a_sp, resv = _admit(S, ca, qu, budget, admit, resv, ratio, clip)
        pt += a_pt
        cp += a_cp
        sp += a_sp
    return pt, dn, cd, cp, sp, pre
