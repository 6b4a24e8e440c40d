"""numba iteration loop behind `recommender.simulator`; import it only from there.

One engine replica, one scheduler iteration per loop turn (vLLM V1-like): running requests
first, then admissions from the waiting queue, KV blocks with an LRU prefix cache, recompute
preemption. `recommender.simulator` owns the semantics, validation and allocation; these
functions trust their inputs. The step time is `perf.step_time` in closed form over the
coefficients `simulator.step_coefficients` derives from perf's own figures; with a measured
step-time provider (`recommender.steptime_aic`) its kernel part comes from that provider's
table instead (`table_seconds`; the provider evaluates its own table through it, so both
paths read one function).
"""

from __future__ import annotations

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
    "draft_fixed_s", "draft_cpu_s", "spec_tokens_per_step", "request_overhead_s",
    "prefill_scale",
)
(C_TOK, C_SAMP, C_ATTN, M_W, M_WE, M_KV, MOE_KEEP, MOE_TOK, COMM_TOK, COMM_FIX, A2A_TOK,
 A2A_FIX, OH_STEP, OH_SEQ, P, SPEC_Q, D_K, D_TOK, D_W, D_KV, D_FIX, D_CPU, SPEC_E, REQ_OH,
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
    """Kernel seconds of one forward from a measured table (layout: steptime_aic.pack):
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
def _release(r, held, priv, hoff, hid, ref, prev, nxt, cs):  # noqa: PLR0917
    """Free r's private units; drop its refs on cached blocks, last block first (the prefix
    becomes the most recently used, so it outlives the tail)."""
    for j in range(held[r] - 1, -1, -1):
        x = hid[hoff[r] + j]
        ref[x] -= 1
        if ref[x] == 0:
            _push(x, prev, nxt, cs)
    held[r] = 0
    cs[FREE] += priv[r]
    priv[r] = 0


@numba.njit(cache=True, nogil=True)
def _insert_prompt_blocks(r, upto, held, priv, hoff, hid, cached, ref, prev, nxt, cs, hu):  # noqa: PLR0917
    """r's computed full prompt blocks held[r]..upto-1 move from private units into the cache
    (or, if another request cached the same block meanwhile, share it and free r's copy)."""
    for j in range(held[r], upto):
        x = hid[hoff[r] + j]
        priv[r] -= hu
        if cached[x]:
            if ref[x] == 0:
                _unlink(x, prev, nxt, cs)
            ref[x] += 1
            cs[FREE] += hu
        else:
            cached[x] = True
            ref[x] = 1
            cs[NCACHED] += 1
    held[r] = upto


@numba.njit(cache=True, nogil=True)
def _ceil_div(a, b):
    return -((-a) // b)


@numba.njit(cache=True, nogil=True)
def _itl_bin(gap):
    if gap <= ITL_LO_S:
        return 0
    b = int((np.log10(gap) - np.log10(ITL_LO_S)) * ITL_BINS_PER_DECADE)
    return min(b, ITL_BINS - 1)


@numba.njit(cache=True, nogil=True)
def run(arr, inp, out, hoff, hid, nfull, n_ids, icfg, coef, table, series, itl):  # noqa: PLR0917, PLR0912, PLR0915
    """Simulate until every request finishes.

    Speculative decoding (coef[D_K] > 0): a decode schedules k + 1 query tokens (budget and
    KV lookahead) and emits the expected coef[SPEC_E] tokens per step as a deterministic
    fluid: floor of a running sum, so a request alternates e.g. 2, 3, 2, 3 tokens for E = 2.5.
    itl: float64 (ITL_BINS + 3) buffer: histogram of gaps between a request's emissions, then
    (sum, count, max) of those gaps.

    icfg: the integer settings in ICFG_FIELDS order (`simulator.KernelSettings`):
    max_seqs, budget, chunked, static, closed_concurrency (0 = open), cap_units,
    unit_tokens, hash_block_tokens, reserve_output. reserve_output: a request is admitted
    only when the blocks of its whole prompt + output fit, and holds them to its end (never
    preempted: TensorRT-LLM's GUARANTEED_NO_EVICT); else its first chunk's. arr is
    overwritten in closed-loop mode (release times).
    table: a measured provider's kernel table (`table_seconds`), empty for the roofline.
    series: float64 (SERIES_CAP, 4) buffer (t, queue, running, kv_used_fraction).
    Returns (first_t, fin_t, preemptions per request, stats[steps, preemptions,
    series_len, error], largest gap between two emissions per request).
    """
    n = arr.shape[0]
    max_seqs, budget_cap = icfg[I_SEQS], icfg[I_BUDGET]
    chunked, static = icfg[I_CHUNKED] != 0, icfg[I_STATIC] != 0
    closed, cap, u, hbs = icfg[I_CLOSED], icfg[I_CAP], icfg[I_UNIT], icfg[I_HASH]
    reserve = icfg[I_RESERVE] != 0
    hu = hbs // u if hbs > 0 else 0
    computed = np.zeros(n, np.int64)
    ntok = inp.copy()
    odone = np.zeros(n, np.int64)
    held = np.zeros(n, np.int64)
    priv = np.zeros(n, np.int64)
    sched = np.zeros(n, np.int64)
    status = np.zeros(n, np.int8)
    first_t = np.full(n, np.nan)
    fin_t = np.full(n, np.nan)
    npre = np.zeros(n, np.int64)
    acc = np.zeros(n, np.float64)
    last_t = np.zeros(n, np.float64)
    last_step = np.full(n, -2, np.int64)
    maxgap = np.zeros(n, np.float64)
    qi = np.int64(coef[SPEC_Q])
    spec_e = coef[SPEC_E]
    speculative = coef[D_K] > 0.0
    measured = table.shape[0] > 0
    cached = np.zeros(n_ids, np.bool_)
    ref = np.zeros(n_ids, np.int32)
    prev = np.full(n_ids, -1, np.int64)
    nxt = np.full(n_ids, -1, np.int64)
    cs = np.array([-1, -1, 0, 0, cap], np.int64)
    run_ = np.empty(min(max_seqs, n) + 1, np.int64)
    wq = np.empty(n, np.int64)
    wh = 0
    wl = 0
    n_run = 0
    nrel = n if closed == 0 else min(closed, n)
    nx = 0
    done = 0
    t = 0.0
    steps = 0
    preempts = 0
    empty = 0
    ns = 0
    stride = 1
    error = 0
    while done < n:
        while nx < nrel and arr[nx] <= t:
            wq[(wh + wl) % n] = nx
            wl += 1
            status[nx] = WAITING
            nx += 1
        if n_run == 0 and wl == 0:
            if nx >= nrel:
                error = 2  # nothing left to release: cannot happen with valid inputs
                break
            t = max(t, arr[nx])
            continue
        budget = budget_cap
        pt = 0.0
        dn = 0.0
        cd = 0.0
        cp = 0.0
        sp = 0.0
        preempted = False
        i = 0
        while i < n_run and budget > 0:
            r = run_[i]
            rem = ntok[r] - computed[r]
            k = min(rem, budget)
            if not chunked and k < rem:
                i += 1
                continue
            decode = rem == 1 and odone[r] > 0
            look = qi if decode else k  # a speculative decode verifies k + 1 tokens
            # ceil(x / u) - priv, clamped at 0, without a division in the common case (a
            # decode inside its last block).
            x = computed[r] + look - held[r] * hbs - priv[r] * u
            need = _ceil_div(x, u) if x > 0 else 0
            ok = True
            while need > 0 and not _reserve(need, hu, cached, prev, nxt, cs):
                n_run -= 1
                v = run_[n_run]
                _release(v, held, priv, hoff, hid, ref, prev, nxt, cs)
                computed[v] = 0
                status[v] = WAITING
                wh = (wh - 1) % n
                wq[wh] = v
                wl += 1
                npre[v] += 1
                preempts += 1
                preempted = True
                if v == r:
                    ok = False
                    break
            if not ok:
                break
            priv[r] += need
            sched[r] = k
            budget -= look
            if decode:
                dn += 1.0
                cd += computed[r]
            else:
                pt += k
                cp += k * (computed[r] + 0.5 * k)
                if k == rem:
                    sp += 1.0
            i += 1
        if not preempted and (not static or n_run == 0):
            while wl > 0 and n_run < max_seqs and (budget > 0 or static):
                r = wq[wh]
                h = 0
                base = hoff[r]
                while h < nfull[r] and cached[hid[base + h]]:
                    h += 1
                while h > 0 and h * hbs >= ntok[r]:
                    h -= 1
                rem = ntok[r] - h * hbs
                k = min(rem, budget)
                if not chunked and k < rem and not (static and k == 0):
                    break
                # blocks the admission claims: the first chunk's, or all the request will hold
                need = _ceil_div(rem + out[r] - 1 - odone[r] if reserve else k, u)
                in_lru = 0
                for j in range(h):
                    if ref[hid[base + j]] == 0:
                        in_lru += 1
                if cs[FREE] + hu * (cs[COUNT] - in_lru) < need:
                    break
                for j in range(h):
                    x = hid[base + j]
                    if ref[x] == 0:
                        _unlink(x, prev, nxt, cs)
                    ref[x] += 1
                _reserve(need, hu, cached, prev, nxt, cs)
                priv[r] = need
                held[r] = h
                computed[r] = h * hbs
                wh = (wh + 1) % n
                wl -= 1
                run_[n_run] = r
                n_run += 1
                status[r] = RUNNING
                sched[r] = k
                budget -= k
                pt += k
                cp += k * (computed[r] + 0.5 * k)
                if k == rem:
                    sp += 1.0
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
        dt_bin = -1
        j = 0
        for i in range(n_run):
            r = run_[i]
            k = sched[r]
            sched[r] = 0
            finished = False
            if k > 0:
                computed[r] += k
                if held[r] < nfull[r]:  # nfull is 0 without prefix caching (hbs 0)
                    upto = min(nfull[r], computed[r] // hbs)
                    if upto > held[r]:
                        _insert_prompt_blocks(
                            r, upto, held, priv, hoff, hid, cached, ref, prev, nxt, cs, hu
                        )
                if computed[r] == ntok[r]:
                    e = 1
                    if odone[r] > 0:
                        if speculative and k == 1:
                            a0 = acc[r]
                            acc[r] = a0 + spec_e
                            e = min(np.int64(acc[r]) - np.int64(a0), out[r] - odone[r])
                        if last_step[r] == steps - 1:
                            gap = dt
                            if dt_bin < 0:
                                dt_bin = _itl_bin(dt)
                            b = dt_bin
                        else:
                            gap = t - last_t[r]
                            b = _itl_bin(gap)
                        itl[b] += 1.0
                        itl[ITL_BINS] += gap
                        itl[ITL_BINS + 1] += 1.0
                        maxgap[r] = max(maxgap[r], gap)
                    last_t[r] = t
                    last_step[r] = steps
                    odone[r] += e
                    computed[r] += e - 1
                    ntok[r] += e
                    if odone[r] == e:
                        first_t[r] = t
                    if odone[r] == out[r]:
                        finished = True
            if finished:
                _release(r, held, priv, hoff, hid, ref, prev, nxt, cs)
                status[r] = DONE
                fin_t[r] = t
                done += 1
                if closed > 0 and nrel < n:
                    arr[nrel] = t + coef[REQ_OH]
                    nrel += 1
            else:
                run_[j] = r
                j += 1
        n_run = j
        if steps % stride == 0:
            if ns == series.shape[0]:
                for q in range(ns // 2):
                    series[q, :] = series[2 * q, :]
                ns //= 2
                stride *= 2
            if steps % stride == 0:
                series[ns, 0] = t
                series[ns, 1] = wl
                series[ns, 2] = n_run
                series[ns, 3] = (cap - cs[FREE] - hu * cs[COUNT]) / cap
                ns += 1
    stats = np.array([steps, preempts, ns, error], np.int64)
    for r in range(n):
        itl[ITL_BINS + 2] = max(itl[ITL_BINS + 2], maxgap[r])
    return first_t, fin_t, npre, stats, maxgap
