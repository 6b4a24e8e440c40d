"""Decode-only stretches taken in one pass (`decode_run`): while nothing waits, every running
request is decoding and was scheduled last step, no arrival comes and none finishes, each step
is the same batch one token further on. Those steps are priced and timed one by one as the
loop would (the step formula, the admission reserve's decay, the series samples), but the
per-request bookkeeping is done once for the stretch, and a request's KV block is taken at the
step its context crosses a block boundary, in the loop's order (residue buckets of the
crossing step modulo the unit size). The result is the loop's, step for step: the same times,
blocks, evictions and samples; only the ITL sum adds a step's gaps as one product.
"""

from __future__ import annotations

import numba
import numpy as np

from recommender.sim.kernel.cache import COUNT, FREE, reserve_units
from recommender.sim.kernel.queues import Q_NREL, Q_NRUN, Q_NX, Q_WL, next_arrival
from recommender.sim.kernel.record import ITL_BINS, itl_bin, sample_series
from recommender.sim.kernel.settings import RES_DECAY, RES_MIN
from recommender.sim.kernel.state import (
    F_LAST,
    F_MAXGAP,
    S_COMPUTED,
    S_HELD,
    S_LAST_STEP,
    S_NFULL,
    S_NTOK,
    S_ODONE,
    S_OUT,
    S_PRIV,
)
from recommender.sim.kernel.step_time import priced_step

# decode_run's memory between calls, an int64 array in the loop (`new_looks`): steps to let
# pass before the next look, the wait after the next failed look (doubling up to MAX_WAIT:
# with a finish every few steps, a look at every running request each step costs more than
# the stretches save), the steps taken in stretches so far, and whether stretches are on.
LOOK_WAIT, LOOK_BACKOFF, LOOK_STEPS, LOOK_ON = 0, 1, 2, 3
MAX_WAIT = 64
# Below this many steps left before the first finish, a stretch is not worth its set-up.
MIN_STEPS = 4
# Units of fewer tokens than this put most running requests across a boundary every step:
# the stretch would do the loop's work again.
MIN_UNIT_TOKENS = 4


@numba.njit(cache=True, nogil=True)
def _steps_left(S, run_, nrun, steps, hbs, u):  # noqa: PLR0917
    """Steps before the first running request finishes, minus one; 0 when a request is not a
    one-token decode scheduled last step (or holds fewer KV tokens than it has computed).
    Newest first: a request still prefilling is usually among the last admitted."""
    left = np.int64(1) << 62
    for i in range(nrun - 1, -1, -1):
        r = run_[i]
        if (S[r, S_NTOK] - S[r, S_COMPUTED] != 1 or S[r, S_ODONE] == 0
                or S[r, S_LAST_STEP] != steps or S[r, S_HELD] < S[r, S_NFULL]
                or S[r, S_HELD] * hbs + S[r, S_PRIV] * u < S[r, S_COMPUTED]):
            return 0
        left = min(left, S[r, S_OUT] - S[r, S_ODONE] - 1)
    return left


@numba.njit(cache=True, nogil=True)
def _crossings(S, run_, nrun, hbs, u):
    """Each running request's first step (1-based) whose token needs a new unit, and the
    running indices grouped by that step modulo u in running order (offsets, members)."""
    first = np.empty(nrun, np.int64)
    counts = np.zeros(u + 1, np.int64)
    for i in range(nrun):
        r = run_[i]
        first[i] = S[r, S_HELD] * hbs + S[r, S_PRIV] * u - S[r, S_COMPUTED] + 1
        counts[first[i] % u + 1] += 1
    offsets = np.cumsum(counts)
    fill = offsets[:u].copy()
    members = np.empty(nrun, np.int64)
    for i in range(nrun):
        b = first[i] % u
        members[fill[b]] = i
        fill[b] += 1
    return first, offsets, members


@numba.njit(cache=True, nogil=True)
def _take_units(S, run_, ca, crossing, j, u, hu):  # noqa: PLR0917
    """The units the requests crossing a block boundary at step j need, taken in running
    order (evicting as the loop would); False, taking none, when they do not all fit."""
    first, offsets, members = crossing
    cs = ca.cs
    b = j % u
    due = 0
    for x in range(offsets[b], offsets[b + 1]):
        if first[members[x]] <= j:
            due += 1
    if cs[FREE] + hu * cs[COUNT] < due:
        return False  # a preemption: the loop's own step decides whom
    for x in range(offsets[b], offsets[b + 1]):
        i = members[x]
        if first[i] <= j:
            reserve_units(1, hu, ca.cached, ca.prev, ca.nxt, cs)
            S[run_[i], S_PRIV] += 1
            first[i] += u
    return True


@numba.njit(cache=True, nogil=True)
def _finish(S, F, run_, nrun, m, t, steps, longest):  # noqa: PLR0917
    """Every running request m tokens further on, last emitting at step `steps` (time t)."""
    for i in range(nrun):
        r = run_[i]
        S[r, S_COMPUTED] += m
        S[r, S_NTOK] += m
        S[r, S_ODONE] += m
        S[r, S_LAST_STEP] = steps
        F[r, F_LAST] = t
        F[r, F_MAXGAP] = max(F[r, F_MAXGAP], longest)


@numba.njit(cache=True, nogil=True)
def new_looks(enabled):
    """decode_run's LOOK_* slots at the loop's start: stretches taken when `enabled`."""
    looks = np.zeros(4, np.int64)
    looks[LOOK_BACKOFF] = 1
    looks[LOOK_ON] = 1 if enabled else 0
    return looks


@numba.njit(cache=True, nogil=True)
def _look(S, qu, steps, ctx, looks):
    """Steps the stretch starting now may take (0: none), and when the next look is due."""
    budget_cap, u, hbs = ctx[0], ctx[1], ctx[2]
    q = qu.q
    nrun = q[Q_NRUN]
    if looks[LOOK_ON] == 0:
        return 0
    if looks[LOOK_WAIT] > 0:
        looks[LOOK_WAIT] -= 1
        return 0
    if q[Q_WL] > 0 or nrun == 0 or budget_cap < nrun or u < MIN_UNIT_TOKENS:
        return 0
    left = _steps_left(S, qu.run, nrun, steps, hbs, u)
    if left < MIN_STEPS:
        looks[LOOK_WAIT] = looks[LOOK_BACKOFF]
        looks[LOOK_BACKOFF] = min(2 * looks[LOOK_BACKOFF], MAX_WAIT)
        return 0
    looks[LOOK_BACKOFF] = 1
    return left


@numba.njit(cache=True, nogil=True)
def decode_run(S, F, ca, qu, t, steps, ratio, ns, stride, ctx, looks):  # noqa: PLR0917
    """Run the decode-only stretch that starts at this step, if there is one worth taking.
    ctx: (budget_cap, unit tokens, hash block tokens, units per hash block, closed-loop
    users, KV units; coef, table, pcfg, series, itl as the loop holds them); looks: the
    LOOK_* slots. Returns (steps taken, then t, steps, ratio, ns, stride after them)."""
    _, u, hbs, hu, closed, cap, coef, table, pcfg, series, itl = ctx
    left = _look(S, qu, steps, ctx, looks)
    if left == 0:
        return 0, t, steps, ratio, ns, stride
    q, run_ = qu.q, qu.run
    nrun = q[Q_NRUN]
    arrival = next_arrival(S, F, qu, closed) if q[Q_NX] < q[Q_NREL] else np.inf
    crossing = _crossings(S, run_, nrun, hbs, u)
    cd = 0.0
    for i in range(nrun):
        cd += S[run_[i], S_COMPUTED]
    dn = float(nrun)
    longest = 0.0
    m = 0
    while m < left and (m == 0 or t < arrival):
        if not _take_units(S, run_, ca, crossing, m + 1, u, hu):
            break
        dt = priced_step(coef, table, 0.0, dn, cd, 0.0, 0.0)
        t += dt
        steps += 1
        m += 1
        ratio = max(pcfg[RES_MIN], ratio - pcfg[RES_DECAY])
        itl[itl_bin(dt)] += dn  # every running request emitted, one step after its last
        itl[ITL_BINS] += dn * dt
        itl[ITL_BINS + 1] += dn
        longest = max(longest, dt)
        cd += dn
        ns, stride = sample_series(series, ns, stride, steps, t, qu, cap, ca.cs, hu)
    if m > 0:
        _finish(S, F, run_, nrun, m, t, steps, longest)
        looks[LOOK_STEPS] += m
    return m, t, steps, ratio, ns, stride
