"""Where each request is: its status code, the running list and the waiting ring (`Queues`,
counters in the `Q_*` slots); arrivals joining the waiting ring and the next one to come.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from recommender.sim.kernel.state import F_ARR, S_STATUS

# Status codes.
PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3


class Queues(NamedTuple):
    """The running list, the waiting ring and the loop's counters (`Q_*` slots of `q`)."""

    run: np.ndarray  # running requests in admission order, q[Q_NRUN] of them
    wq: np.ndarray  # waiting ring: q[Q_WL] requests from q[Q_WH]
    q: np.ndarray


# Queues.q slots: waiting ring head and length, running count, next to release, released so
# far, finished.
Q_WH, Q_WL, Q_NRUN, Q_NX, Q_NREL, Q_DONE = range(6)


@numba.njit(cache=True, nogil=True, inline="always")
def release_arrivals(S, F, qu, t, closed):
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
def next_arrival(S, F, qu, closed):
    """The earliest entry time among the released requests still to come."""
    q = qu.q
    first = np.inf
    for i in range(q[Q_NX], q[Q_NREL]):
        if S[i, S_STATUS] == PENDING:
            first = min(first, F[i, F_ARR])
            if i >= closed:
                break
    return first
