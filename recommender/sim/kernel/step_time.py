"""One step's seconds, compiled: the step formula on the roofline (`step_seconds`, perf's
module docstring states it) or with a measured provider's table (`measured_step_seconds`,
`table_seconds`; the provider evaluates its own table through it, so both paths read one
function), plus the engine's overheads and the speculative draft.
"""

from __future__ import annotations

import numba
import numpy as np

from recommender.sim.kernel.coefficients import (
    A2A_FIX,
    A2A_TOK,
    C_ATTN,
    C_SAMP,
    C_TOK,
    COMM_FIX,
    COMM_TOK,
    M_KV,
    M_W,
    M_WE,
    MOE_KEEP,
    MOE_TOK,
    OH_SEQ,
    OH_STEP,
    P,
)
from recommender.sim.kernel.spec_coefficients import (
    D_CPU,
    D_FIX,
    D_K,
    D_KV,
    D_TOK,
    D_W,
    PF_SCALE,
    SPEC_Q,
)


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
def priced_step(coef, table, prefill_tokens, decode_seqs, decode_ctx_sum,  # noqa: PLR0917
                prefill_ctx_sum, sampled_prefills):
    """One step's seconds with the measured table when there is one (`table` non-empty),
    else on the roofline."""
    if table.shape[0] > 0:
        return measured_step_seconds(coef, table, prefill_tokens, decode_seqs, decode_ctx_sum,
                                     prefill_ctx_sum, sampled_prefills)
    return step_seconds(coef, prefill_tokens, decode_seqs, decode_ctx_sum, prefill_ctx_sum,
                        sampled_prefills)
