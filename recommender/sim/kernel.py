"""numba iteration loop behind `recommender.sim.simulator`; import it only from there.

One engine replica, one scheduler iteration per loop turn (vLLM V1-like): running requests
first, then admissions from the waiting queue, KV blocks with an LRU prefix cache, recompute
preemption. `recommender.sim.simulator` owns the semantics, validation and allocation; these
functions trust their inputs. The step time is `perf.step_time` in closed form over the
coefficients `simulator.step_coefficients` derives from perf's own figures; with a measured
step-time provider (`recommender.model.steptime_aic`) its kernel part comes from that provider's
table instead (`table_seconds`; the provider evaluates its own table through it, so both
paths read one function).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

# Cache scalars in one int64 array: LRU head/tail, evictable count, cached entries, free units.
HEAD, TAIL, COUNT, NCACHED, FREE = 0, 1, 2, 3, 4
# The step formula's coefficients (`perf.StepCoefficients`, named there; this is its field
# order, checked at import of perf) and their slots in the float64 array the loop reads.
COEF_FIELDS = (
    "dense_flop_s", "sample_flop_s", "attn_flop_s", "dense_weight_s", "expert_weight_s",
    "kv_byte_s", "expert_keep", "expert_token_scale", "comm_token_s", "comm_fixed_s",
    "a2a_token_s", "a2a_fixed_s", "step_overhead_s", "seq_overhead_s", "roofline_p",
    "spec_queries", "draft_forwards", "draft_flop_s", "draft_weight_s", "draft_kv_s",
    "draft_fixed_s", "draft_cpu_s", "spec_tokens_per_step", "closed_loop_reentry_s",
    "prefill_scale",
)
(C_TOK, C_SAMP, C_ATTN, M_W, M_WE, M_KV, MOE_KEEP, MOE_TOK, COMM_TOK, COMM_FIX, A2A_TOK,
 A2A_FIX, OH_STEP, OH_SEQ, P, SPEC_Q, D_K, D_TOK, D_W, D_KV, D_FIX, D_CPU, SPEC_E, REENTRY,
 PF_SCALE) = range(len(COEF_FIELDS))
N_COEF = len(COEF_FIELDS)
# The loop's integer settings (`simulator.KernelSettings`, named there), in this order.
ICFG_FIELDS = ("max_seqs", "budget", "chunked", "static", "closed_concurrency", "cap_units",
               "unit_tokens", "hash_block_tokens", "reserve_output")
(I_SEQS, I_BUDGET, I_CHUNKED, I_STATIC, I_CLOSED, I_CAP, I_UNIT, I_HASH, I_RESERVE) = range(
    len(ICFG_FIELDS))
# ITL histogram: log-spaced bins from ITL_LO_S, ITL_BINS_PER_DECADE per decade.
ITL_LO_S = 1e-6
ITL_BINS_PER_DECADE = 400
ITL_BINS = 11 * ITL_BINS_PER_DECADE  # 1 µs .. 100 000 s
# Status codes.
PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3
SERIES_CAP = 4096  # time-series samples kept (decimated by 2 whenever full)


@numba.njit(cache=True, nogil=True)
def _roof(compute, memory, p):
    return (compute**p + memory**p) ** (1.0 / p)


@numba.njit(cache=True, nogil=True)
def _interp(xs, ys, x):
    """Piecewise-linear y(x) over ascending nodes; below the first node its value, above the
    last proportional to x (costs grow linearly in tokens / sequences / context there)."""
    n = xs.shape[0]
    if x <= xs[0]:
        return ys[0]
    if x >= xs[n - 1]:
        return ys[n - 1] * x / xs[n - 1]
    i = np.searchsorted(xs, x) - 1
    w = (x - xs[i]) / (xs[i + 1] - xs[i])
    return ys[i] + w * (ys[i + 1] - ys[i])


@numba.njit(cache=True, nogil=True)
def table_seconds(  # noqa: PLR0917
    table, prefill_tokens, prefill_ctx_sum, decode_tokens, decode_ctx_sum, prefill_scale=1.0
):
    """Kernel seconds of one forward from a measured table (layout: aic_tables.pack):
    shared (non-attention) ops over all tokens + prefill attention + decode attention of
    `decode_tokens` queries at their mean context (bilinear in queries x context). Prefill
    attention = a fixed part once per step + the prompt tokens x a per-token rate at their
    mean causal context. `prefill_scale` multiplies the prefill tokens' share of the shared
    ops (GEMMs, MoE; by token count), not their attention."""
    nt, nl, nd, nc = int(table[0]), int(table[1]), int(table[2]), int(table[3])
    prefill_fixed = table[4]
    o = 5
    t_x, t_y = table[o:o + nt], table[o + nt:o + 2 * nt]
    o += 2 * nt
    l_x, l_y = table[o:o + nl], table[o + nl:o + 2 * nl]
    o += 2 * nl
    d_x, c_x = table[o:o + nd], table[o + nd:o + nd + nc]
    o += nd + nc
    grid = table[o:o + nd * nc].reshape((nd, nc))
    tokens = prefill_tokens + decode_tokens
    share = (decode_tokens + prefill_scale * prefill_tokens) / tokens if tokens > 0.0 else 1.0
    total = _interp(t_x, t_y, tokens) * share
    if prefill_tokens > 0.0:
        total += prefill_fixed + prefill_tokens * _interp(
            l_x, l_y, 2.0 * prefill_ctx_sum / prefill_tokens)
    if decode_tokens > 0.0:
        ctx = decode_ctx_sum / decode_tokens
        d = min(max(decode_tokens, d_x[0]), d_x[nd - 1])
        i = min(max(np.searchsorted(d_x, d) - 1, 0), nd - 2)
        w = (d - d_x[i]) / (d_x[i + 1] - d_x[i])
        lo, hi = _interp(c_x, grid[i], ctx), _interp(c_x, grid[i + 1], ctx)
        # Beyond the largest measured batch, attention scales with the queries.
        total += (lo + w * (hi - lo)) * max(decode_tokens / d_x[nd - 1], 1.0)
    return total


@numba.njit(cache=True, nogil=True)
def _overheads(coef, decode_seqs, decode_ctx_sum, sampled_prefills, p):
    """The engine's per-step and per-position overheads and the speculative draft (the same
    for every provider)."""
    total = coef[OH_STEP] + coef[OH_SEQ] * (decode_seqs * coef[SPEC_Q] + sampled_prefills)
    if coef[D_K] > 0.0 and decode_seqs > 0.0:
        draft = _roof(coef[D_TOK] * decode_seqs, coef[D_W] + coef[D_KV] * decode_ctx_sum, p)
        total += coef[D_K] * (draft + coef[D_FIX]) + coef[D_CPU] * decode_seqs
    return total


@numba.njit(cache=True, nogil=True)
def measured_step_seconds(  # noqa: PLR0917
    coef, table, prefill_tokens, decode_seqs, decode_ctx_sum, prefill_ctx_sum, sampled_prefills
):
    """One step with a measured provider: its table's kernel time (comm included) +
    overheads + draft (decode contexts are read once for all k + 1 verified tokens)."""
    q = coef[SPEC_Q]
    kernel = table_seconds(table, prefill_tokens, prefill_ctx_sum, decode_seqs * q,
                           q * decode_ctx_sum, coef[PF_SCALE])
    return kernel + _overheads(coef, decode_seqs, decode_ctx_sum, sampled_prefills, coef[P])


@numba.njit(cache=True, nogil=True)
def step_seconds(  # noqa: PLR0917
    coef, prefill_tokens, decode_seqs, decode_ctx_sum, prefill_ctx_sum, sampled_prefills
):
    """One step on the roofline (perf's module docstring states the formula), for a batch
    given as sums (contexts summed over sequences / tokens)."""
    q = coef[SPEC_Q]
    decode_tokens = decode_seqs * q
    tokens = prefill_tokens + decode_tokens
    compute = (
        coef[C_TOK] * tokens
        + coef[C_SAMP] * (decode_tokens + sampled_prefills)
        + coef[C_ATTN] * (q * decode_ctx_sum + prefill_ctx_sum)
    )
    touched = 1.0 - coef[MOE_KEEP] ** (tokens * coef[MOE_TOK])
    memory = coef[M_W] + coef[M_WE] * touched + coef[M_KV] * (decode_ctx_sum + tokens)
    p = coef[P]
    total = _roof(compute, memory, p)
    total += coef[COMM_TOK] * tokens + coef[COMM_FIX] + coef[A2A_TOK] * tokens + coef[A2A_FIX]
    return total + _overheads(coef, decode_seqs, decode_ctx_sum, sampled_prefills, p)


@numba.njit(cache=True, nogil=True)
def _unlink(x, prev, nxt, cs):
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
def _reserve(need, hu, cached, prev, nxt, cs):  # noqa: PLR0917
    """Take `need` free units, evicting least recently used cached blocks; False if short."""
    if need <= 0:
        return True
    if cs[FREE] + hu * cs[COUNT] < need:
        return False
    while cs[FREE] < need:
        x = cs[HEAD]
        _unlink(x, prev, nxt, cs)
        cached[x] = False
        cs[NCACHED] -= 1
        cs[FREE] += hu
    cs[FREE] -= need
    return True


@numba.njit(cache=True, nogil=True)
def _release(r, S, hid, ref, prev, nxt, cs):  # noqa: PLR0917
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
def _insert_prompt_blocks(r, upto, S, hid, cached, ref, prev, nxt, cs, hu):  # noqa: PLR0917
    """r's computed full prompt blocks held..upto-1 move from private units into the cache
    (or, if another request cached the same block meanwhile, share it and free r's copy)."""
    base = S[r, S_HOFF]
    for j in range(S[r, S_HELD], upto):
        x = hid[base + j]
        S[r, S_PRIV] -= hu
        if cached[x]:
            if ref[x] == 0:
                _unlink(x, prev, nxt, cs)
            ref[x] += 1
            cs[FREE] += hu
        else:
            cached[x] = True
            ref[x] = 1
            cs[NCACHED] += 1
    S[r, S_HELD] = upto


@numba.njit(cache=True, nogil=True)
def _ceil_div(a, b):
    return -((-a) // b)


@numba.njit(cache=True, nogil=True)
def _itl_bin(gap):
    if gap <= ITL_LO_S:
        return 0
    b = int((np.log10(gap) - np.log10(ITL_LO_S)) * ITL_BINS_PER_DECADE)
    return min(b, ITL_BINS - 1)


# Per-request state: one int64 row and one float64 row per request (serving order), named
# columns. Two arrays instead of twenty keep the compiled loop free of reference counting.
(S_OUT, S_HOFF, S_NFULL, S_COMPUTED, S_NTOK, S_ODONE, S_HELD, S_PRIV, S_SCHED, S_STATUS,
 S_NPRE, S_LAST_STEP) = range(12)
N_S = 12
# arrival (closed loop: release time, written as users finish), first token, finish,
# speculative tokens accrued, last emission, largest gap between two emissions
F_ARR, F_FIRST, F_FIN, F_ACC, F_LAST, F_MAXGAP = range(6)
N_F = 6


class Requests(NamedTuple):
    """The requests in serving order, as the simulator prepared them."""

    arrival: np.ndarray  # float64 entry times (closed loop: overwritten with release times)
    inp: np.ndarray  # int64 prompt tokens
    out: np.ndarray  # int64 output tokens
    hoff: np.ndarray  # int64 start of each request's block ids in hid
    hid: np.ndarray  # int32 dense ids of every request's full prompt blocks, flat
    nfull: np.ndarray  # int64 full prompt blocks with ids per request
    n_ids: int  # distinct block ids


class Cache(NamedTuple):
    """The KV pool: free units and the prefix cache's blocks (LRU list of unreferenced ones)."""

    hid: np.ndarray  # block ids of every request's full prompt blocks, flat
    cached: np.ndarray
    ref: np.ndarray
    prev: np.ndarray
    nxt: np.ndarray
    cs: np.ndarray  # HEAD, TAIL, COUNT, NCACHED, FREE


class Queues(NamedTuple):
    """The running list, the waiting ring and the loop's counters (`Q_*` slots of `q`)."""

    run: np.ndarray  # running requests in admission order, q[Q_NRUN] of them
    wq: np.ndarray  # waiting ring: q[Q_WL] requests from q[Q_WH]
    q: np.ndarray


# Queues.q slots: waiting ring head and length, running count, next to release, released so
# far, finished.
Q_WH, Q_WL, Q_NRUN, Q_NX, Q_NREL, Q_DONE = range(6)
# The scheduler policy's floats (`simulator.policy_settings`, named in
# `policies.SchedulerPolicy`), in this order: SGLang-style admission reserve (a running
# request holds back reserve × its remaining output, up to RES_CLIP tokens; the reserve
# starts at RES_INIT, falls by RES_DECAY per step to RES_MIN, and returns to RES_INIT on a
# preemption), and longest-prefix-match ordering of the waiting queue while it holds at
# most LPM_MAX_QUEUE requests (0: FCFS).
PCFG_FIELDS = ("reserve_init", "reserve_min", "reserve_decay", "reserve_clip_tokens",
               "lpm_max_queue")
RES_INIT, RES_MIN, RES_DECAY, RES_CLIP, LPM_MAX_QUEUE = range(len(PCFG_FIELDS))


@numba.njit(cache=True, nogil=True)
def _preempt_newest(S, ca, qu):
    """Recompute preemption of the most recently admitted running request: its KV freed, it
    returns to the front of the waiting ring. Returns it."""
    q, wq = qu.q, qu.wq
    n = S.shape[0]
    q[Q_NRUN] -= 1
    v = qu.run[q[Q_NRUN]]
    _release(v, S, ca.hid, ca.ref, ca.prev, ca.nxt, ca.cs)
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
        while need > 0 and not _reserve(need, hu, cached, prev, nxt, cs):
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


@numba.njit(cache=True, nogil=True, inline="always")
def _cached_prefix(S, hid, cached, r, hbs):
    """Leading prompt blocks of r already cached (never the whole prompt: the last token is
    always computed)."""
    h = 0
    base = S[r, S_HOFF]
    while h < S[r, S_NFULL] and cached[hid[base + h]]:
        h += 1
    while h > 0 and h * hbs >= S[r, S_NTOK]:
        h -= 1
    return h


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
        keys[j] = -_cached_prefix(S, ca.hid, ca.cached, r, hbs)
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
        h = _cached_prefix(S, hid, cached, r, hbs)
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
                _unlink(x, prev, nxt, cs)
            ref[x] += 1
        _reserve(need, hu, cached, prev, nxt, cs)
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


@numba.njit(cache=True, nogil=True, inline="always")
def _advance(S, F, ca, qu, t, dt, steps, hbs, hu, spec, closed, reentry, itl):  # noqa: PLR0917, PLR0912, PLR0915
    """After a step of `dt` ending at `t`: every scheduled request's tokens computed, its
    full prompt blocks cached; a request whose computed tokens reach its length emits 1
    token (the expected fluid of the speculative ones), recorded in the ITL histogram;
    finished requests release their KV (and, closed loop, their user's next request is
    released). The emission stays in this loop, not a call: a call per token with the state
    arrays costs their reference counts (4x the loop's time)."""
    q, run_ = qu.q, qu.run
    hid, cached, ref, prev, nxt, cs = ca.hid, ca.cached, ca.ref, ca.prev, ca.nxt, ca.cs
    speculative, spec_e = spec
    n = S.shape[0]
    dt_bin = -1  # the ITL bin of a one-step gap, computed once per step
    j = 0
    for i in range(q[Q_NRUN]):
        r = run_[i]
        k = S[r, S_SCHED]
        S[r, S_SCHED] = 0
        finished = False
        if k > 0:
            S[r, S_COMPUTED] += k
            if S[r, S_HELD] < S[r, S_NFULL]:  # nfull is 0 without prefix caching (hbs 0)
                upto = min(S[r, S_NFULL], S[r, S_COMPUTED] // hbs)
                if upto > S[r, S_HELD]:
                    _insert_prompt_blocks(r, upto, S, hid, cached, ref, prev, nxt, cs, hu)
            if S[r, S_COMPUTED] == S[r, S_NTOK]:
                e = 1
                if S[r, S_ODONE] > 0:
                    if speculative and k == 1:
                        a0 = F[r, F_ACC]
                        F[r, F_ACC] = a0 + spec_e
                        e = min(np.int64(F[r, F_ACC]) - np.int64(a0),
                                S[r, S_OUT] - S[r, S_ODONE])
                    if S[r, S_LAST_STEP] == steps - 1:
                        gap = dt
                        if dt_bin < 0:
                            dt_bin = _itl_bin(dt)
                        b = dt_bin
                    else:
                        gap = t - F[r, F_LAST]
                        b = _itl_bin(gap)
                    itl[b] += 1.0
                    itl[ITL_BINS] += gap
                    itl[ITL_BINS + 1] += 1.0
                    F[r, F_MAXGAP] = max(F[r, F_MAXGAP], gap)
                F[r, F_LAST] = t
                S[r, S_LAST_STEP] = steps
                S[r, S_ODONE] += e
                S[r, S_COMPUTED] += e - 1
                S[r, S_NTOK] += e
                if S[r, S_ODONE] == e:
                    F[r, F_FIRST] = t
                finished = S[r, S_ODONE] == S[r, S_OUT]
        if finished:
            _release(r, S, hid, ref, prev, nxt, cs)
            S[r, S_STATUS] = DONE
            F[r, F_FIN] = t
            q[Q_DONE] += 1
            if closed > 0 and q[Q_NREL] < n:
                F[q[Q_NREL], F_ARR] = t + reentry
                q[Q_NREL] += 1
        else:
            run_[j] = r
            j += 1
    q[Q_NRUN] = j


@numba.njit(cache=True, nogil=True, inline="always")
def _release_arrivals(S, F, qu, t, closed):
    """Requests whose entry time has come join the waiting ring.

    Entry times are in serving order except a closed loop's first `closed` requests (its
    users' ramped starts): a user who finishes before the last user has started sends its
    next request at once, so those are passed over while they are still to come instead of
    holding up every later request (which made the next request wait for the ramp's end:
    seconds of TTFT that no client measures).
    """
    q, wq = qu.q, qu.wq
    n = S.shape[0]
    i = q[Q_NX]
    while i < q[Q_NREL]:
        if S[i, S_STATUS] == PENDING:
            if F[i, F_ARR] <= t:
                wq[(q[Q_WH] + q[Q_WL]) % n] = i
                q[Q_WL] += 1
                S[i, S_STATUS] = WAITING
            elif i >= closed:
                break  # past the ramped starts, entry times are in order
        i += 1
    while q[Q_NX] < q[Q_NREL] and S[q[Q_NX], S_STATUS] != PENDING:
        q[Q_NX] += 1


@numba.njit(cache=True, nogil=True, inline="always")
def _next_arrival(S, F, qu, closed):
    """The earliest entry time among the released requests still to come."""
    q = qu.q
    first = np.inf
    for i in range(q[Q_NX], q[Q_NREL]):
        if S[i, S_STATUS] == PENDING:
            first = min(first, F[i, F_ARR])
            if i >= closed:
                break
    return first


@numba.njit(cache=True, nogil=True, inline="always")
def _sample(series, ns, stride, steps, t, qu, cap, cs, hu):  # noqa: PLR0917
    """Record (t, queue, running, KV used) every `stride` steps, halving the samples (and
    doubling the stride) when the buffer is full. Returns (ns, stride)."""
    if steps % stride == 0:
        if ns == series.shape[0]:
            for j in range(ns // 2):
                series[j, :] = series[2 * j, :]
            ns //= 2
            stride *= 2
        if steps % stride == 0:
            series[ns, 0] = t
            series[ns, 1] = qu.q[Q_WL]
            series[ns, 2] = qu.q[Q_NRUN]
            series[ns, 3] = (cap - cs[FREE] - hu * cs[COUNT]) / cap
            ns += 1
    return ns, stride


@numba.njit(cache=True, nogil=True)
def _state(req, cap, max_seqs):
    """(S, F, cache, queues) at t = 0: nothing computed, everything pending."""
    n, n_ids = req.arrival.shape[0], req.n_ids
    S = np.zeros((n, N_S), np.int64)
    S[:, S_OUT] = req.out
    S[:, S_HOFF] = req.hoff
    S[:, S_NFULL] = req.nfull
    S[:, S_NTOK] = req.inp
    S[:, S_LAST_STEP] = -2
    F = np.zeros((n, N_F), np.float64)
    F[:, F_ARR] = req.arrival
    F[:, F_FIRST] = np.nan
    F[:, F_FIN] = np.nan
    ca = Cache(req.hid, np.zeros(n_ids, np.bool_), np.zeros(n_ids, np.int32),
               np.full(n_ids, -1, np.int64), np.full(n_ids, -1, np.int64),
               np.array([-1, -1, 0, 0, cap], np.int64))
    qu = Queues(np.empty(min(max_seqs, n) + 1, np.int64), np.empty(n, np.int64),
                np.zeros(6, np.int64))
    return S, F, ca, qu


@numba.njit(cache=True, nogil=True, inline="always")
def _batch(S, ca, qu, budget_cap, admit, qi, pcfg, ratio):  # noqa: PLR0917
    """This step's batch: the running requests scheduled, then (if none was preempted) the
    waiting ones ordered by the policy and admitted. Returns (prefill tokens, decodes, decode
    context sum, prefill context sum, prompts sampled, preemptions)."""
    _, chunked, static, u, hbs, hu, _ = admit
    q = qu.q
    clip = np.int64(pcfg[RES_CLIP])
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


@numba.njit(cache=True, nogil=True)
def run(req, icfg, coef, table, pcfg, series, itl):  # noqa: PLR0917
    """Simulate `req` (`Requests`) until every request finishes: per step, release
    arrivals, schedule the running requests (`_schedule_running`), order
    (`_order_longest_prefix`) and admit (`_admit`) waiting ones, price the step (the step
    formula), advance (`_advance`).

    Speculative decoding (coef[D_K] > 0): a decode schedules k + 1 query tokens (budget and
    KV lookahead) and emits the expected coef[SPEC_E] tokens per step as a deterministic
    fluid: floor of a running sum, so a request alternates e.g. 2, 3, 2, 3 tokens for E = 2.5.
    itl: float64 (ITL_BINS + 3) buffer: histogram of gaps between a request's emissions, then
    (sum, count, max) of those gaps.

    icfg: the integer settings in ICFG_FIELDS order (`simulator.KernelSettings`):
    max_seqs, budget, chunked, static, closed_concurrency (0 = open), cap_units,
    unit_tokens, hash_block_tokens, reserve_output. reserve_output: a request is admitted
    only when the blocks of its whole prompt + output fit, and holds them to its end (never
    preempted: TensorRT-LLM's GUARANTEED_NO_EVICT); else its first chunk's.
    pcfg: the policy's floats in PCFG_FIELDS order (`simulator.policy_settings`).
    table: a measured provider's kernel table (`table_seconds`), empty for the roofline.
    series: float64 (SERIES_CAP, 4) buffer (t, queue, running, kv_used_fraction).
    req.arrival is overwritten in closed-loop mode (release times).
    Returns (first_t, fin_t, preemptions per request, stats[steps, preemptions,
    series_len, error], largest gap between two emissions per request).
    """
    n = req.arrival.shape[0]
    max_seqs, budget_cap = icfg[I_SEQS], icfg[I_BUDGET]
    chunked, static = icfg[I_CHUNKED] != 0, icfg[I_STATIC] != 0
    closed, cap, u, hbs = icfg[I_CLOSED], icfg[I_CAP], icfg[I_UNIT], icfg[I_HASH]
    reserve = icfg[I_RESERVE] != 0
    hu = hbs // u if hbs > 0 else 0
    S, F, ca, qu = _state(req, cap, max_seqs)
    q = qu.q
    q[Q_NREL] = n if closed == 0 else min(closed, n)
    qi = np.int64(coef[SPEC_Q])
    spec = (coef[D_K] > 0.0, coef[SPEC_E])
    admit = (max_seqs, chunked, static, u, hbs, hu, reserve)
    ratio = pcfg[RES_INIT]
    measured = table.shape[0] > 0
    t = 0.0
    steps = preempts = empty = ns = error = 0
    stride = 1
    while q[Q_DONE] < n:
        _release_arrivals(S, F, qu, t, closed)
        if q[Q_NRUN] == 0 and q[Q_WL] == 0:
            if q[Q_NX] >= q[Q_NREL]:
                error = 2  # nothing left to release: cannot happen with valid inputs
                break
            t = max(t, _next_arrival(S, F, qu, closed))
            continue
        pt, dn, cd, cp, sp, pre = _batch(S, ca, qu, budget_cap, admit, qi, pcfg, ratio)
        preempts += pre
        if pre > 0:
            ratio = pcfg[RES_INIT]
        if pt + dn == 0.0:
            empty += 1
            if empty > 3:
                error = 1  # nothing schedulable: a request larger than the KV pool
                break
            continue
        empty = 0
        if measured:
            dt = measured_step_seconds(coef, table, pt, dn, cd, cp, sp)
        else:
            dt = step_seconds(coef, pt, dn, cd, cp, sp)
        t += dt
        steps += 1
        ratio = max(pcfg[RES_MIN], ratio - pcfg[RES_DECAY])
        _advance(S, F, ca, qu, t, dt, steps, hbs, hu, spec, closed, coef[REENTRY], itl)
        ns, stride = _sample(series, ns, stride, steps, t, qu, cap, ca.cs, hu)
    stats = np.array([steps, preempts, ns, error], np.int64)
    itl[ITL_BINS + 2] = max(itl[ITL_BINS + 2], np.max(F[:, F_MAXGAP]) if n else 0.0)
    req.arrival[:] = F[:, F_ARR]  # closed loop: the release times, for the caller's latencies
    return (F[:, F_FIRST].copy(), F[:, F_FIN].copy(), S[:, S_NPRE].copy(), stats,
            F[:, F_MAXGAP].copy())
