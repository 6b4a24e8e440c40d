"""What the loop measures beside each request's times: the histogram of gaps between a
request's emissions (log-spaced bins, `itl_bin`) and the time series of queue, running and
KV use (`sample_series`, decimated to `SERIES_CAP` samples).
"""

from __future__ import annotations

import numba
import numpy as np

from recommender.sim.kernel.cache import COUNT, FREE
from recommender.sim.kernel.queues import Q_NRUN, Q_WL

# ITL histogram: log-spaced bins from ITL_LO_S, ITL_BINS_PER_DECADE per decade.
ITL_LO_S = 1e-6
ITL_BINS_PER_DECADE = 400
ITL_BINS = 11 * ITL_BINS_PER_DECADE  # 1 µs .. 100 000 s
SERIES_CAP = 4096  # time-series samples kept (decimated by 2 whenever full)


@numba.njit(cache=True, nogil=True)
def itl_bin(gap):
    if gap <= ITL_LO_S:
        return 0
    b = int((np.log10(gap) - np.log10(ITL_LO_S)) * ITL_BINS_PER_DECADE)
    return min(b, ITL_BINS - 1)


@numba.njit(cache=True, nogil=True, inline="always")
def sample_series(series, ns, stride, steps, t, qu, cap, cs, hu):  # noqa: PLR0917
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
