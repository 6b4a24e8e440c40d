"""The scheduler loop (`run`) over the requests as the simulator prepared them (`Requests`):
per step, release arrivals, build the batch, price it, advance; its state at t = 0.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from recommender.sim.kernel.advance import advance
from recommender.sim.kernel.cache import Cache
from recommender.sim.kernel.decode_run import LOOK_STEPS, decode_run, new_looks
from recommender.sim.kernel.queues import (
    Q_DONE,
    Q_NREL,
    Q_NRUN,
    Q_NX,
    Q_WL,
    Queues,
    next_arrival,
    release_arrivals,
)
from recommender.sim.kernel.record import ITL_BINS, sample_series
from recommender.sim.kernel.schedule import batch
from recommender.sim.kernel.settings import (
    I_BUDGET,
    I_CAP,
    I_CHUNKED,
    I_CLOSED,
    I_DECODE_RUNS,
    I_HASH,
    I_RESERVE,
    I_SEQS,
    I_STATIC,
    I_UNIT,
    RES_DECAY,
    RES_INIT,
    RES_MIN,
)
from recommender.sim.kernel.spec_coefficients import D_K, REENTRY, SPEC_E, SPEC_Q
from recommender.sim.kernel.state import (
    F_ARR,
    F_FIN,
    F_FIRST,
    F_MAXGAP,
    N_F,
    N_S,
    S_HOFF,
    S_LAST_STEP,
    S_NFULL,
    S_NPRE,
    S_NTOK,
    S_OUT,
)
from recommender.sim.kernel.step_time import priced_step


class Requests(NamedTuple):
    """The requests in serving order, as the simulator prepared them."""

    arrival: np.ndarray  # float64 entry times (closed loop: overwritten with release times)
    inp: np.ndarray  # int64 prompt tokens
    out: np.ndarray  # int64 output tokens
    hoff: np.ndarray  # int64 start of each request's block ids in hid
    hid: np.ndarray  # int32 dense ids of every request's full prompt blocks, flat
    nfull: np.ndarray  # int64 full prompt blocks with ids per request
    n_ids: int  # distinct block ids


@numba.njit(cache=True, nogil=True)
def _state(req, cap, max_seqs, closed):
    """(S, F, cache, queues) at t = 0: nothing computed, everything pending, all released
    (open loop) or each user's first (closed loop)."""
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
    qu.q[Q_NREL] = n if closed == 0 else min(closed, n)
    return S, F, ca, qu


@numba.njit(cache=True, nogil=True)
def run(req, icfg, coef, table, pcfg, series, itl):  # noqa: PLR0917
    """Simulate `req` (`Requests`) until every request finishes: per step, release
    arrivals, schedule the running requests, order and admit waiting ones (`schedule.batch`),
    price the step (the step formula, `step_time`), advance (`advance.advance`).

    Speculative decoding (coef[D_K] > 0): a decode schedules k + 1 query tokens (budget and
    KV lookahead) and emits the expected coef[SPEC_E] tokens per step as a deterministic
    fluid: floor of a running sum, so a request alternates e.g. 2, 3, 2, 3 tokens for E = 2.5.
    itl: float64 (ITL_BINS + 3) buffer: histogram of gaps between a request's emissions, then
    (sum, count, max) of those gaps.

    icfg: the integer settings in ICFG_FIELDS order (`simulator.KernelSettings`):
    max_seqs, budget, chunked, static, closed_concurrency (0 = open), cap_units,
    unit_tokens, hash_block_tokens, reserve_output, decode_runs. reserve_output: a request is
    admitted only when the blocks of its whole prompt + output fit, and holds them to its end
    (never preempted: TensorRT-LLM's GUARANTEED_NO_EVICT); else its first chunk's.
    decode_runs: decode-only stretches taken in one pass (`decode_run.decode_run`).
    pcfg: the policy's floats in PCFG_FIELDS order (`simulator.policy_settings`).
    table: a measured provider's kernel table (`table_seconds`), empty for the roofline.
    series: float64 (SERIES_CAP, 4) buffer (t, queue, running, kv_used_fraction).
    req.arrival is overwritten in closed-loop mode (release times).
    Returns (first_t, fin_t, preemptions per request, stats[steps, preemptions,
    series_len, error, steps taken in decode runs], largest gap between two emissions per
    request).
    """
    n = req.arrival.shape[0]
    max_seqs, budget_cap = icfg[I_SEQS], icfg[I_BUDGET]
    chunked, static = icfg[I_CHUNKED] != 0, icfg[I_STATIC] != 0
    closed, cap, u, hbs = icfg[I_CLOSED], icfg[I_CAP], icfg[I_UNIT], icfg[I_HASH]
    reserve = icfg[I_RESERVE] != 0
    hu = hbs // u if hbs > 0 else 0
    S, F, ca, qu = _state(req, cap, max_seqs, closed)
    q = qu.q
    qi = np.int64(coef[SPEC_Q])
    spec = (coef[D_K] > 0.0, coef[SPEC_E])
    admit = (max_seqs, chunked, static, u, hbs, hu, reserve)
    ratio = pcfg[RES_INIT]
    t = 0.0
    steps = preempts = empty = ns = error = 0
    stride = 1
    # Decode-only stretches in one pass; speculation's fluid emission is left to the loop.
    looks = new_looks(icfg[I_DECODE_RUNS] != 0 and coef[D_K] == 0.0 and qi == 1)
    ctx = (budget_cap, u, hbs, hu, closed, cap, coef, table, pcfg, series, itl)
    while q[Q_DONE] < n:
        release_arrivals(S, F, qu, t, closed)
        if q[Q_NRUN] == 0 and q[Q_WL] == 0:
            if q[Q_NX] >= q[Q_NREL]:
                error = 2  # nothing left to release: cannot happen with valid inputs
                break
            t = max(t, next_arrival(S, F, qu, closed))
            continue
        m, t, steps, ratio, ns, stride = decode_run(S, F, ca, qu, t, steps, ratio, ns,
                                                    stride, ctx, looks)
        if m > 0:
            continue
        pt, dn, cd, cp, sp, pre = batch(S, ca, qu, budget_cap, admit, qi, pcfg, ratio)
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
        dt = priced_step(coef, table, pt, dn, cd, cp, sp)
        t += dt
        steps += 1
        ratio = max(pcfg[RES_MIN], ratio - pcfg[RES_DECAY])
        advance(S, F, ca, qu, t, dt, steps, hbs, hu, spec, closed, coef[REENTRY], itl)
        ns, stride = sample_series(series, ns, stride, steps, t, qu, cap, ca.cs, hu)
    stats = np.array([steps, preempts, ns, error, looks[LOOK_STEPS]], np.int64)
    itl[ITL_BINS + 2] = max(itl[ITL_BINS + 2], np.max(F[:, F_MAXGAP]) if n else 0.0)
    req.arrival[:] = F[:, F_ARR]  # closed loop: the release times, for the caller's latencies
    return (F[:, F_FIRST].copy(), F[:, F_FIN].copy(), S[:, S_NPRE].copy(), stats,
            F[:, F_MAXGAP].copy())
