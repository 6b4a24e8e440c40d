"""Tests for recommender/decision/capacity/ (trial, boundary, plan): the SLO boundary lands on
the simulator's own saturation point, scales with replicas, and the growth table and curve
agree with it."""

from __future__ import annotations

import numpy as np
import pytest

from core.capacity import Boundary, compare_boundary
from engines.config import EngineConfig
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.capacity.boundary import RESOLUTION, TraceRates, search_boundary
from recommender.decision.capacity.plan import plan_capacity
from recommender.decision.capacity.trial import Setting, SizedDeployment, holds_at
from recommender.decision.goals import Goals, Target
from recommender.model.defaults import scheduler_caps
from recommender.model.params import load_params
from recommender.sim.simulator import SimOptions, SimRequests, simulate

GPU, MODEL = get_gpu("H100-SXM"), get_model("llama-3.1-8b")
N, ISL, OSL, RATE = 4000, 512, 128, 5.0
SEQS = 16  # a small max_num_seqs cap: the KV pool never binds, the cap does
CONFIG = EngineConfig(engine="vllm", model=MODEL.name, max_model_len=2048, max_num_seqs=SEQS)
GOALS = Goals("goodput", 1.0, None)  # p95 TTFT within 1 s


def _target(gpus: int) -> Target:
    return Target(GPU, MODEL, gpus, hardware_facts(GPU, gpus), model_facts(MODEL),
                  load_params())


def _evenly_spaced() -> SimRequests:
    """A fixed-length load at RATE req/s, one request every 1/RATE s."""
    return SimRequests(np.arange(N) / RATE, np.full(N, ISL), np.full(N, OSL))


def _ceiling_rps() -> float:
    """The simulator's throughput ceiling for this load: a closed loop with four times the
    cap in flight (the cap always full, a queue always waiting), started staggered."""
    users = 4 * SEQS
    result = simulate(SimRequests(np.zeros(N), np.full(N, ISL), np.full(N, OSL)), CONFIG, GPU,
                      MODEL, params=load_params(),
                      options=SimOptions(arrival="closed_loop", concurrency=users,
                                         closed_loop_ramp_s=2.0))
    return result.summary.request_throughput_rps


def _boundary_rps(gpus: int) -> tuple[float, str, int]:
    dep = SizedDeployment(CONFIG, gpus, "vllm seqs16", None)
    found = search_boundary(Setting(_evenly_spaced(), _target(gpus), GOALS), dep)
    assert found.holding is not None and found.failing is not None
    return found.holding.multiple * RATE, found.failing.binding, len(found.trials)


def test_boundary_lands_within_5_percent_of_the_simulators_saturation_point():
    ceiling = _ceiling_rps()
    boundary, binding, simulations = _boundary_rps(1)
    assert boundary == pytest.approx(ceiling, rel=0.05)
    # A handful of simulations, not a grid; the cap binds (the simulator's running count).
    assert simulations <= 12
    assert binding == "max_num_seqs"


def test_doubling_gpus_at_least_doubles_a_replica_parallel_boundary():
    one, _, _ = _boundary_rps(1)
    two, _, _ = _boundary_rps(2)
    assert two >= 2 * one * (1 - 1e-9)


def test_the_boundary_holds_and_the_next_load_fails():
    setting = Setting(_evenly_spaced(), _target(1), GOALS)
    dep = SizedDeployment(CONFIG, 1, "vllm seqs16", None)
    found = search_boundary(setting, dep)
    assert found.holding is not None and found.failing is not None
    assert found.failing.multiple / found.holding.multiple <= 1 + RESOLUTION
    at = holds_at(setting, dep, replicas=1, multiple=found.holding.multiple)
    past = holds_at(setting, dep, replicas=1, multiple=found.holding.multiple * 1.1)
    assert at.holds and at.ttft_p95_s is not None and at.ttft_p95_s <= 1.0
    assert not past.holds and past.binding != "none"


def test_plan_capacity_growth_curve_and_band():
    from core.figures import Band

    band = Band(cell="c", median_ape=0.2, rows=10)
    pick = SizedDeployment(CONFIG, 1, "vllm seqs16", band)
    other = SizedDeployment(CONFIG.model_copy(update={"max_num_seqs": 8}), 1, "vllm seqs8", None)
    rates = TraceRates(today_rps=RATE, mean_rps=RATE / 2, peak_rps=RATE * 2, peak_window_s=60)
    cap = plan_capacity(Setting(_evenly_spaced(), _target(1), GOALS), pick, [other], rates)
    b = cap.pick
    assert b.rate_low_rps == pytest.approx(0.8 * b.rate_rps)
    assert b.rate_high_rps == pytest.approx(1.2 * b.rate_rps)
    assert b.multiple_of_mean == pytest.approx(b.rate_rps / (RATE / 2))
    assert b.multiple_of_peak == pytest.approx(b.rate_rps / (RATE * 2))
    # Half the cap holds less (the cap binds in both).
    assert cap.alternatives[0].rate_rps < b.rate_rps
    # Evenly spaced arrivals dealt round-robin: r replicas hold r times one replica's
    # boundary, so factor f needs ceil(f × today / boundary) replicas (one more at most,
    # from the 2 % bisection).
    for row in cap.growth:
        need = int(np.ceil(row.rate_rps / b.rate_rps))
        assert row.pick_replicas in (need, need + 1)
        assert (row.binding == "none") == (row.rate_rps <= b.rate_rps)
        assert row.alternative == "vllm seqs8" and row.alternative_gpus is not None
        assert row.alternative_gpus >= (row.pick_gpus or 0)
    rps = [p.rate_rps for p in cap.curve.points]
    assert rps == sorted(rps) and cap.curve.boundary_rps == b.rate_rps
    assert all(p.holds == (p.rate_rps <= b.rate_rps) for p in cap.curve.points)
    # each other engine's best has its own curve, from its own search, to its own boundary
    assert cap.curve.label == "vllm seqs16"
    (alt,) = cap.alternative_curves
    assert alt.label == "vllm seqs8" and alt.boundary_rps == cap.alternatives[0].rate_rps
    assert all(p.holds == (p.rate_rps <= alt.boundary_rps) for p in alt.points)
    # at a load both hold, half the cap waits longer for a slot: a higher p95 TTFT
    both = {p.multiple: p for p in cap.curve.points}
    shared = [(both[q.multiple], q) for q in alt.points if q.multiple in both
              and q.holds and q.ttft_p95_s is not None]
    assert shared and all(q.ttft_p95_s >= p.ttft_p95_s for p, q in shared)


def test_compare_boundary_error_and_band():
    b = Boundary(label="x", engine="vllm", replicas=1, gpus=1, rate_rps=12.0,
                 rate_low_rps=9.0, rate_high_rps=15.0, multiple_of_mean=1.0,
                 multiple_of_peak=None, binding="compute", simulations=5)
    got = compare_boundary(b, 10.0)
    assert got.error == pytest.approx(0.2) and got.within_band
    assert not compare_boundary(b, 16.0).within_band
    assert compare_boundary(b, 0.0).error is None


def test_long_prompts_bind_the_kv_pool_first():
    from recommender.model.memory import plan_memory

    isl, osl, n = 16_000, 2_048, 600
    config = EngineConfig(engine="vllm", model=MODEL.name, max_model_len=isl + osl)
    # The pool holds fewer whole requests than the engine's default max_num_seqs admits.
    pool = plan_memory(config, GPU, MODEL).kv_capacity_tokens
    assert config.max_num_seqs is None
    assert pool / (isl + osl) < scheduler_caps(config, GPU).max_running
    requests = SimRequests(np.arange(n) / 1.0, np.full(n, isl), np.full(n, osl))
    found = search_boundary(Setting(requests, _target(1), Goals("goodput", 5.0, None)),
                            SizedDeployment(config, 1, "vllm long", None))
    assert found.failing is not None and found.failing.binding == "kv_capacity"


def test_the_boundarys_range_is_the_throughput_interval_when_there_is_one():
    from core.figures import Band, Interval
    from recommender.decision.capacity.boundary import BoundarySearch, boundary_of
    from recommender.decision.capacity.trial import Trial

    found = BoundarySearch(trials=[], holding=Trial(2.0, True, "none", 0.1, None),
                           failing=Trial(2.1, False, "compute", 2.0, None))
    rates = TraceRates(today_rps=RATE, mean_rps=RATE, peak_rps=None, peak_window_s=None)
    band = Band(cell="c", median_ape=0.2, rows=10)
    interval = Interval(metric="throughput", low=0.6, high=1.5, basis="c", rows=40,
                        pooled=False)
    with_interval = boundary_of(found, SizedDeployment(CONFIG, 1, "a", band, interval), rates)
    assert with_interval.rate_rps == pytest.approx(2.0 * RATE)
    assert (with_interval.rate_low_rps, with_interval.rate_high_rps) == pytest.approx(
        (0.6 * 2.0 * RATE, 1.5 * 2.0 * RATE))
    band_only = boundary_of(found, SizedDeployment(CONFIG, 1, "a", band), rates)
    assert (band_only.rate_low_rps, band_only.rate_high_rps) == pytest.approx(
        (0.8 * 2.0 * RATE, 1.2 * 2.0 * RATE))
    assert boundary_of(found, SizedDeployment(CONFIG, 1, "a", None), rates).rate_low_rps is None
