"""The calibration cell a prediction falls in: its load regime (`regime_of`: offline, low batch,
fixed concurrency or rate) and its cell (`cell_of`: engine × GPU family × dense/MoE × regime),
the unit the held-out errors are measured per (`recommender.calibration.bands_file`).

A trace replay (what `recommend` simulates) is open-loop, and no published row measures an
open loop. `replay_regime` maps it to the closed-loop regime with the same mean number of
requests in the system (Little's law: L = throughput × mean E2E, per engine replica): the
cells' errors are the step-time model's at the batch sizes that load produces, and an open
loop at that occupancy runs the same batches.
"""

from __future__ import annotations

import math
from typing import Literal

from core.load import Burst, ClosedLoop, Offline, Rate
from recommender.catalog.specs import GPU, ModelSpec

# Closed loop at this many users or fewer is "low batch": the step is weight-read bound and
# per-step overheads dominate, unlike the throughput-bound regimes above it.
LOW_BATCH_MAX_CONCURRENCY = 4

Regime = Literal["offline", "low_batch", "fixed_concurrency", "rate"]


def regime_of(arrival: ClosedLoop | Rate | Burst | Offline | None,
              concurrency: int | None = None) -> Regime:
    """The load regime: offline (max throughput), low batch (closed loop at ≤
    LOW_BATCH_MAX_CONCURRENCY users), fixed concurrency (closed loop above) or rate (open
    loop, a burst too: MLPerf's Server scenario, `vllm bench serve --request-rate`).
    `arrival` None: closed loop at `concurrency`, offline when that is None too."""
    if isinstance(arrival, Offline):
        return "offline"
    if isinstance(arrival, ClosedLoop):
        concurrency = arrival.concurrency
    elif arrival is not None:
        return "rate"
    if concurrency is None:
        return "offline"
    return "low_batch" if concurrency <= LOW_BATCH_MAX_CONCURRENCY else "fixed_concurrency"


def cell_of(engine: str, gpu: GPU, model: ModelSpec, regime: Regime) -> str:
    """The calibration cell 'engine/gpu family/dense|moe/regime', e.g.
    'vllm/hopper/dense/low_batch'."""
    return f"{engine}/{gpu.architecture}/{'moe' if model.is_moe else 'dense'}/{regime}"


def replay_regime(throughput_rps: float, mean_e2e_s: float | None) -> Regime:
    """The regime of an open-loop replay served at `throughput_rps` (completed requests/s of
    one engine replica) with mean E2E `mean_e2e_s`: the closed-loop regime at its mean number
    of requests in the system, L = throughput × E2E (Little's law), at least 1; "rate" (no
    calibrated cell) when nothing completed."""
    if mean_e2e_s is None or not math.isfinite(mean_e2e_s) or throughput_rps <= 0:
        return "rate"
    return regime_of(None, concurrency=max(1, round(throughput_rps * mean_e2e_s)))
