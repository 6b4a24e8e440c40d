"""After a step: the scheduled tokens computed, prompt blocks cached, tokens emitted and
recorded, finished requests released (`advance`).
"""

from __future__ import annotations

import numba
import numpy as np

from recommender.sim.kernel.cache import insert_prompt_blocks, release_blocks
from recommender.sim.kernel.queues import DONE, Q_DONE, Q_NREL, Q_NRUN
from recommender.sim.kernel.record import ITL_BINS, itl_bin
from recommender.sim.kernel.state import (
    F_ACC,
    F_ARR,
    F_FIN,
    F_FIRST,
    F_LAST,
    F_MAXGAP,
    S_COMPUTED,
    S_HELD,
    S_LAST_STEP,
    S_NFULL,
    S_NTOK,
    S_ODONE,
    S_OUT,
    S_SCHED,
    S_STATUS,
)


@numba.njit(cache=True, nogil=True, inline="always")
def advance(S, F, ca, qu, t, dt, steps, hbs, hu, spec, closed, reentry, itl):  # noqa: PLR0917, PLR0912, PLR0915
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
                    insert_prompt_blocks(r, upto, S, hid, cached, ref, prev, nxt, cs, hu)
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
                            dt_bin = itl_bin(dt)
                        b = dt_bin
                    else:
                        gap = t - F[r, F_LAST]
                        b = itl_bin(gap)
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
            release_blocks(r, S, hid, ref, prev, nxt, cs)
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
