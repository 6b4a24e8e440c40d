"""Tests for recommender/sim/kernel/decode_run.py: decode-only stretches taken in one pass give
the step-by-step loop's answer. Each simulation's kernel call is run again with the stretches
off (`KernelSettings.decode_runs`, the loop as it was, step by step) and every output is
compared: times, preemptions, step counts, the time series and the ITL histogram exactly; only
the ITL sum, which a stretch adds per step rather than per request, to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from recommender.model.params import EngineParams, PerfParams, load_params
from recommender.sim.kernel import loop
from recommender.sim.kernel.record import ITL_BINS
from recommender.sim.kernel.settings import I_DECODE_RUNS
from recommender.sim.simulator import SimOptions, SimRequests, simulate
from tests.recommender.sim.configs import GPU, MODEL, engine_config, small_kv

ROOFLINE = PerfParams(engines={e: EngineParams(compute_efficiency=0.5, bandwidth_efficiency=0.8,
                                               step_overhead_s=0.001, per_seq_overhead_s=2e-5)
                               for e in ("vllm", "trtllm")}, step_time="roofline")


def _shared_prefixes(rng: np.random.Generator, n: int = 300) -> SimRequests:
    """n requests at Poisson times, each a 40-block system prompt shared by its group of 4
    plus its own blocks: prefix hits, cached blocks evicted under pressure."""
    bs = 16
    own = rng.integers(1, 30, n)
    hashes, offsets = [], [0]
    for i in range(n):
        group = 1_000_000 * (i % 4 + 1) + np.arange(40)
        hashes.append(np.concatenate([group, 10_000 * (i + 1) + np.arange(own[i])]))
        offsets.append(offsets[-1] + 40 + own[i])
    inp = (40 + own) * bs + 5
    return SimRequests(np.cumsum(rng.exponential(0.05, n)), inp, rng.integers(20, 400, n),
                       block_hashes=np.concatenate(hashes).astype(np.uint64),
                       block_offsets=np.array(offsets), block_size=bs)


def _lengths(n: int, rng: np.random.Generator, rate: float | None) -> SimRequests:
    arrival = np.zeros(n) if rate is None else np.cumsum(rng.exponential(1 / rate, n))
    return SimRequests(arrival, rng.integers(50, 3000, n), rng.integers(10, 800, n))


CASES = {
    "closed loop of fixed lengths, roofline": (
        lambda rng: SimRequests(np.zeros(400), np.full(400, 300), np.full(400, 500)),
        engine_config(), ROOFLINE, {"arrival": "closed_loop", "concurrency": 48}),
    "Poisson arrivals, measured tables": (
        lambda rng: _lengths(500, rng, rate=12.0), engine_config(), None, {}),
    "offline burst preempted in a tiny KV pool": (
        lambda rng: _lengths(200, rng, rate=None), small_kv(12_000, max_num_seqs=64), ROOFLINE,
        {"arrival": "offline"}),
    "shared prefixes evicted under pressure": (
        _shared_prefixes, small_kv(20_000, prefix_caching=True), ROOFLINE, {}),
    "whole output reserved (TensorRT-LLM)": (
        lambda rng: _lengths(200, rng, rate=None), small_kv(30_000, engine="trtllm"), ROOFLINE,
        {"arrival": "offline"}),
    "static batches": (
        lambda rng: _lengths(150, rng, rate=None), engine_config(max_num_seqs=32), ROOFLINE,
        {"arrival": "offline", "batching": "static"}),
}


def _outputs(args: tuple, decode_runs: bool) -> tuple:
    req, icfg, coef, table, pcfg, series, itl = args
    icfg = icfg.copy()
    icfg[I_DECODE_RUNS] = int(decode_runs)
    req = req._replace(arrival=req.arrival.copy())
    series, itl = np.zeros_like(series), np.zeros_like(itl)
    out = loop.run(req, icfg, coef, table, pcfg, series, itl)
    return out, series[: out[3][2]], itl


@pytest.mark.parametrize("case", CASES)
def test_decode_runs_give_the_step_by_step_answer(case: str, monkeypatch) -> None:
    make, cfg, params, options = CASES[case]
    calls: list[tuple] = []
    real_run = loop.run

    def recording(req, *rest):
        calls.append((req._replace(arrival=req.arrival.copy()),
                      *(a.copy() if isinstance(a, np.ndarray) else a for a in rest)))
        return real_run(req, *rest)

    monkeypatch.setattr(loop, "run", recording)
    req = make(np.random.default_rng(7))
    simulate(req, cfg, GPU, MODEL, params=params or load_params(),
             options=SimOptions(**options))
    monkeypatch.setattr(loop, "run", real_run)
    assert calls
    preempted = 0
    for args in calls:
        (first, fin, npre, stats, gap), series, itl = _outputs(args, decode_runs=True)
        (first0, fin0, npre0, stats0, gap0), series0, itl0 = _outputs(args, decode_runs=False)
        assert stats0[4] == 0 and stats[4] > 0, "no decode run was taken"
        np.testing.assert_array_equal(stats[:4], stats0[:4])
        for got, want in ((first, first0), (fin, fin0), (npre, npre0), (gap, gap0),
                          (series, series0), (itl[:ITL_BINS], itl0[:ITL_BINS])):
            np.testing.assert_array_equal(got, want)
        assert itl[ITL_BINS] == pytest.approx(itl0[ITL_BINS], rel=1e-12)
        np.testing.assert_array_equal(itl[ITL_BINS + 1:], itl0[ITL_BINS + 1:])
        preempted += int(stats0[1])
    if case.startswith("offline burst"):
        assert preempted > 0  # the stretches stopped where the loop had to preempt


def test_a_closed_loop_of_fixed_lengths_is_mostly_decode_runs(monkeypatch) -> None:
    """48 users of 300 + 500 tokens: between the waves of prefills every step is a decode of
    the same batch, so most steps are taken in decode runs."""
    req = CASES["closed loop of fixed lengths, roofline"][0](np.random.default_rng(0))
    calls: list[tuple] = []
    real_run = loop.run

    def recording(*args):
        out = real_run(*args)
        calls.append(out[3])
        return out

    monkeypatch.setattr(loop, "run", recording)
    simulate(req, engine_config(), GPU, MODEL, params=ROOFLINE,
             options=SimOptions(arrival="closed_loop", concurrency=48))
    [stats] = calls
    assert stats[4] > 0.9 * stats[0]
