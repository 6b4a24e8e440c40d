"""Whether a simulated open loop is past what its deployment serves: `overload_warning`.

Below capacity an open loop's backlog stays a handful of requests; past it the backlog grows
through the whole run, so the run's TTFT and E2E are its length's, not the deployment's,
and no interval fitted on published runs covers them. `predict` adds the warning this
module words.
"""

from __future__ import annotations

import math

import numpy as np

from recommender.sim.result import SimResult

# Past capacity: over the second half of the sending, fewer requests finish than are sent, by
# more than a Poisson count's noise (OVERLOAD_SIGMAS standard deviations). A few % of capacity
# near saturation moves the latencies by minutes: MLPerf's Server runs sit at ~97 % of their
# offline throughput.
OVERLOAD_SIGMAS = 3.0
OPEN_LOOP_MODES = frozenset({"rate", "sent"})  # stationary sends; a burst's phases are meant


def overload_warning(mode: str, runs: list[tuple[np.ndarray, SimResult]]) -> list[str]:
    """The warning for an open loop (`mode` rate or sent) one of whose replica runs (its
    requests' send offsets, its result) finishes fewer requests than it is sent over the
    second half of its sending; [] otherwise."""
    if mode not in OPEN_LOOP_MODES:
        return []
    for arrival_s, res in runs:
        served = np.isfinite(res.e2e_s)  # refused requests never finish
        sent_s, done_s = arrival_s[served], (arrival_s + res.e2e_s)[served]
        if not len(sent_s) or float(sent_s.max()) <= 0:
            continue
        end_s = float(sent_s.max())
        start_s = end_s / 2
        sent = int(np.sum(sent_s > start_s))
        done = int(np.sum((done_s > start_s) & (done_s <= end_s)))
        if sent - done > OVERLOAD_SIGMAS * math.sqrt(max(sent, 1)):
            half_s = end_s - start_s
            return [f"over capacity: in the second half of the sending a replica was sent "
                    f"{sent:,} requests and finished {done:,} ({sent / half_s:.3g} against "
                    f"{done / half_s:.3g} req/s): the backlog grows through the run, so TTFT "
                    "and E2E grow with its length and the intervals do not cover them; lower "
                    "the rate or add replicas"]
    return []


__all__ = ["OVERLOAD_SIGMAS", "overload_warning"]
