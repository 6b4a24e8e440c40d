"""One trial of a deployment: does it hold a load, and which limit binds when it does not.

Owns what a trial simulates (a deployment to size, `SizedDeployment`; the window, hardware
and goals, `Setting`), the verdict (p95 TTFT and TPOT within the limits, the load kept up
with, no more refusals than scoring allows) and the limit that binds first, read from the
simulator's own state at a load that fails. The search over loads is `boundary`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.capacity import Limit
from core.figures import Band, Interval
from engines.config import EngineConfig
from recommender.decision.goals import Goals, Target
from recommender.decision.scoring import KEEP_UP_SHARE, MAX_REJECTED_SHARE, served_rps
from recommender.model.defaults import scheduler_caps
from recommender.sim.result import SimResult
from recommender.sim.simulator import SimRequests, simulate
from recommender.sim.trace_window import replica_share

KV_FULL = 0.95  # a pool this full at the failing load counts as the KV limit binding
INTERFERENCE_ITL_RATIO = 2.0  # p99 emission gap over p50: steps stretched by prefills


@dataclass(frozen=True, slots=True)
class SizedDeployment:
    """One candidate to size: its config, replicas, label, the prediction's band and its
    throughput interval (what the boundary's range is stated from when present)."""

    config: EngineConfig
    replicas: int
    label: str
    band: Band | None
    interval: Interval | None = None

    @property
    def gpus_per_replica(self) -> int:
        return self.config.gpus_per_instance


@dataclass(frozen=True, slots=True)
class Setting:
    """What every trial simulates on: the window's requests, the hardware and the limits."""

    requests: SimRequests
    target: Target
    goals: Goals


@dataclass(slots=True)
class Trial:
    """One simulated load on one deployment and its verdict."""

    multiple: float
    holds: bool
    binding: Limit
    ttft_p95_s: float | None
    tpot_p95_s: float | None


def holds_at(setting: Setting, dep: SizedDeployment, *, replicas: int, multiple: float) -> Trial:
    """Simulate `replicas` copies of `dep` on the trace compressed `multiple` times (replica
    0's round-robin share) and judge it: p95 TTFT and TPOT within the limits, the load kept
    up with (KEEP_UP_SHARE of the offered rate) and no more refusals than scoring allows."""
    target = setting.target
    share = replica_share(setting.requests, replicas * dep.config.dp)  # a DP rank's share
    options = setting.goals.sim_options().model_copy(update={"time_scale": 1.0 / multiple})
    result = simulate(share, dep.config, target.gpu, target.model, params=target.params,
                      options=options)
    s = result.summary
    span = float(share.arrival_s[-1] - share.arrival_s[0]) / multiple
    n = len(share.arrival_s)
    # All sent at once (or one request): no rate to keep up with; the SLOs alone judge.
    kept_up = span <= 0 or served_rps(s, span) >= KEEP_UP_SHARE * n / span
    ttft_ok = _within(s.ttft_s.p95, options.slo_ttft_s)
    tpot_ok = _within(s.tpot_s.p95, options.slo_tpot_s)
    served = s.rejected <= MAX_REJECTED_SHARE * n
    ok = kept_up and ttft_ok and tpot_ok and served
    binding: Limit = "none" if ok else _binding(result, dep.config, target,
                                                queue_grew=not (kept_up and ttft_ok))
    return Trial(multiple, ok, binding, s.ttft_s.p95, s.tpot_s.p95)


def _within(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)


def _binding(result: SimResult, config: EngineConfig, target: Target, *,
             queue_grew: bool) -> Limit:
    """The limit the simulator's state shows binding at a load that fails."""
    s = result.summary
    if not queue_grew:  # only TPOT broke: decode steps are too slow
        itl = s.itl_s
        if itl.p50 and itl.p99 and itl.p99 > INTERFERENCE_ITL_RATIO * itl.p50:
            return "prefill_interference"  # some steps are much longer: they carry prefills
        return "compute"
    kv_peak = float(np.max(result.kv_usage)) if result.kv_usage.size else 0.0
    if s.preemptions > 0 or kv_peak >= KV_FULL or s.rejected > 0:
        return "kv_capacity"
    seqs = scheduler_caps(config, target.gpu).max_running
    queued = result.queue_len > 0
    if np.any(result.running_seqs[queued] >= seqs):
        return "max_num_seqs"
    return "compute"
