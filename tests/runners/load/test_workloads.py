"""Workload schedules: arrival processes checked by their properties (counts, order, mean rate
and gap CV within standard errors derived here, seeds), burst and soak phases, closed-loop
pools, and trace replay (window, time scale, lengths, block hashes) against a real Mooncake
trace read with pandas.

No test pins a generator's draws: a change of numpy's streams or of the order of draws must
not fail a test while the schedule keeps the distribution it promises.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from core.errors import RunnerError
from core.load import Burst, DatasetLengths, FixedLengths, LoadSpec, Offline, Rate, TraceWindow
from runners.load.schedule import BENCH_KINDS
from runners.load.workloads import build_schedule
from tests.runners import loads
from tests.runners.loads import burst, closed, gamma, poisson, soak

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl.gz"

# How far a statistic may stray from its expectation, in standard errors. For a normal
# estimate, 4 standard errors are passed by chance about once in 16,000 seeds.
Z = 4.0


def _at(schedule) -> np.ndarray:
    return np.array([r.at_s for r in schedule.requests])


def _gaps_from_zero(at: np.ndarray) -> np.ndarray:
    """Inter-arrival gaps of a renewal schedule whose first arrival is one gap after 0."""
    return np.diff(np.concatenate([[0.0], at]))


def _gamma_cv_standard_error(cv: float, n: int) -> float:
    """Standard error of the sample CV (sd / mean) of `n` i.i.d. Gamma gaps whose CV is `cv`.

    Delta method on g(m, v) = sqrt(v) / m over the sample mean m and variance v:
    n·Var ≈ c⁴ + (μ4 − σ⁴) / (4σ²μ²) − μ3/μ³. A Gamma law of shape k (c² = 1/k) has
    μ3 = 2kθ³ and μ4 = (3k² + 6k)θ⁴, so n·Var = 1/k² + (k + 3)/(2k²) − 2/k² = (k + 1)/(2k²)
    = c²(1 + c²)/2. (Exponential, c = 1: 1/√n.)
    """
    return cv * math.sqrt((1.0 + cv**2) / (2.0 * n))


def _spec(kind: str, **fields: Any) -> LoadSpec:
    """The load of `kind` (its `tests.runners.loads` helper; 4-token prompts and outputs)."""
    return getattr(loads, kind)(**fields)


def _assert_lengths(schedule, prompt_tokens: int, output_tokens: int) -> None:
    assert {(r.input_tokens, r.output_tokens) for r in schedule.requests} == {
        (prompt_tokens, output_tokens)}
    assert [r.index for r in schedule.requests] == list(range(len(schedule.requests)))


def test_every_kind_is_a_plugin():
    assert set(BENCH_KINDS) == {"trace", "poisson", "gamma", "concurrency", "burst", "soak",
                                "boundary", "sweep"}


def test_poisson_count_mode_count_order_and_rate():
    rate, n = 50.0, 20_000
    sched = build_schedule(poisson(rate, num_requests=n, input_tokens=10, output_tokens=5, seed=7))
    at = _at(sched)
    assert len(at) == n
    assert at[0] > 0 and np.all(np.diff(at) > 0)  # the first arrival is one gap after 0
    _assert_lengths(sched, 10, 5)
    assert sched.open_loop and sched.concurrency is None
    # Exponential gaps with mean 1/rate and sd 1/rate: their mean is within Z standard errors.
    gaps = _gaps_from_zero(at)
    assert abs(gaps.mean() - 1 / rate) < Z * (1 / rate) / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1.0) < Z * _gamma_cv_standard_error(1.0, n)
    # With no duration, the one phase ends at the last arrival.
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [("poisson", 0.0, at[-1])]


@pytest.mark.parametrize(("rate", "duration", "count"), [
    (200.0, 60.0, 12_000), (7.3, 10.0, 73), (0.33, 10.0, 3), (1.26, 5.0, 6)])
def test_poisson_duration_mode_offers_exactly_rate_times_duration(rate, duration, count):
    sched = build_schedule(poisson(rate, duration_s=duration, seed=3))
    at = _at(sched)
    assert len(at) == count  # round(rate × duration), written out by hand
    assert np.all(np.diff(at) > 0) and at[0] >= 0 and at[-1] < duration
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [
        ("poisson", 0.0, duration)]
    _assert_lengths(sched, 4, 4)


def test_poisson_duration_mode_is_a_poisson_process():
    rate, duration = 200.0, 60.0
    sched = build_schedule(poisson(rate, duration_s=duration, seed=3))
    at = _at(sched)
    n = len(at)
    # Given its count, a Poisson process's arrivals are uniform over the window: their mean is
    # duration/2 with standard error duration/√(12 n).
    assert abs(at.mean() - duration / 2) < Z * duration / math.sqrt(12 * n)
    gaps = np.diff(at)
    assert abs(gaps.std() / gaps.mean() - 1.0) < Z * _gamma_cv_standard_error(1.0, n)
    # The gaps follow the exponential law of mean 1/rate: Kolmogorov's bound
    # P(√n·D > x) ≤ 2·exp(−2x²) is 7e-4 at x = 2.
    cdf = 1.0 - np.exp(-rate * np.sort(gaps))
    ks = np.max(np.abs(cdf - np.arange(1, len(gaps) + 1) / len(gaps)))
    assert ks < 2.0 / math.sqrt(len(gaps))


def test_poisson_request_cap_within_a_duration_keeps_the_first_arrivals():
    full = _at(build_schedule(poisson(100.0, duration_s=10.0, seed=5)))
    capped = build_schedule(poisson(100.0, num_requests=300, duration_s=10.0, seed=5))
    assert len(full) == 1000 and len(capped.requests) == 300
    np.testing.assert_array_equal(_at(capped), full[:300])
    assert capped.phases[0].end_s == 10.0


SEEDED_SPECS = [
    {"kind": "poisson", "rate_rps": 10.0, "num_requests": 50},
    {"kind": "poisson", "rate_rps": 10.0, "duration_s": 5.0},
    {"kind": "gamma", "rate_rps": 10.0, "cv": 2.0, "num_requests": 50},
    {"kind": "gamma", "rate_rps": 10.0, "cv": 0.5, "duration_s": 5.0},
    {"kind": "burst", "base_rate_rps": 5.0, "peak_rate_rps": 50.0, "steady_s": 2.0,
     "burst_s": 1.0},
    {"kind": "soak", "rate_rps": 10.0, "duration_s": 6.0, "window_s": 2.0},
]


@pytest.mark.parametrize("fields", SEEDED_SPECS, ids=lambda f: f["kind"])
def test_same_seed_repeats_and_another_seed_differs(fields):
    def at(seed):
        return _at(build_schedule(_spec(**fields, seed=seed)))
    np.testing.assert_array_equal(at(1), at(1))
    a, b = at(1), at(2)
    assert len(a) != len(b) or not np.array_equal(a, b)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_cv_and_mean(cv):
    rate, n = 100.0, 40_000
    sched = build_schedule(gamma(rate, cv, num_requests=n))
    at = _at(sched)
    assert len(at) == n and at[0] > 0 and np.all(np.diff(at) >= 0)
    gaps = _gaps_from_zero(at)
    # Gamma gaps with mean 1/rate and sd cv/rate.
    assert abs(gaps.mean() - 1 / rate) < Z * (cv / rate) / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - cv) < Z * _gamma_cv_standard_error(cv, n)
    _assert_lengths(sched, 4, 4)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_duration_mode_count_and_window(cv):
    rate, duration = 100.0, 100.0
    sched = build_schedule(gamma(rate, cv, duration_s=duration, seed=11))
    at = _at(sched)
    assert at[0] > 0 and np.all(np.diff(at) >= 0) and at[-1] < duration
    # A renewal process's count over a long window is about normal with mean rate·T and
    # variance cv²·rate·T.
    expected = rate * duration
    assert abs(len(at) - expected) < Z * cv * math.sqrt(expected)
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [("gamma", 0.0, duration)]


def test_gamma_with_count_and_duration_stops_at_the_first_bound():
    capped = build_schedule(gamma(100.0, 1.5, num_requests=50, duration_s=10.0))
    assert len(capped.requests) == 50 and _at(capped)[-1] < 10.0
    timed = build_schedule(gamma(100.0, 1.5, num_requests=10000, duration_s=0.5))
    assert 0 < len(timed.requests) < 10_000 and _at(timed)[-1] < 0.5


def test_burst_phases_rates_and_order():
    spec = burst(20.0, 200.0, 30.0, 10.0, input_tokens=4, output_tokens=4)
    sched = build_schedule(spec)
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [
        ("steady", 0.0, 30.0), ("burst", 30.0, 40.0), ("recovery", 40.0, 70.0)]
    df = pd.DataFrame({"at": _at(sched), "phase": [r.phase for r in sched.requests]})
    assert df["at"].is_monotonic_increasing
    assert df["phase"].tolist() == (["steady"] * 600 + ["burst"] * 2000
                                    + ["recovery"] * 600)
    bounds = {"steady": (0, 30), "burst": (30, 40), "recovery": (40, 70)}
    for name, (lo, hi) in bounds.items():
        part = df[df.phase == name]
        assert part["at"].between(lo, hi, inclusive="left").all()
        expected = (20.0 if name != "burst" else 200.0) * (hi - lo)
        assert len(part) == expected, name  # each phase offers exactly its rate
        # ... spread evenly over the phase: uniform arrivals have mean (lo + hi)/2 and
        # standard error (hi − lo)/√(12 n).
        assert abs(part["at"].mean() - (lo + hi) / 2) < Z * (hi - lo) / math.sqrt(
            12 * len(part)), name
        assert sched.phase_at((lo + hi) / 2) == name
    _assert_lengths(sched, 4, 4)


def test_soak_open_loop_windows():
    sched = build_schedule(soak(10.0, 25.0, rate_rps=50.0, input_tokens=4, output_tokens=4))
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [
        ("w0", 0.0, 10.0), ("w1", 10.0, 20.0), ("w2", 20.0, 25.0)]
    at = _at(sched)
    assert np.all(np.diff(at) >= 0) and at[0] >= 0 and at[-1] < 25.0
    for r in sched.requests:
        k = int(r.at_s // 10.0)
        assert r.phase == f"w{k}"
    # Each window offers exactly rate × its length, the last one cut at the duration.
    phases = [r.phase for r in sched.requests]
    assert [phases.count(f"w{k}") for k in range(3)] == [500, 500, 250]
    assert sched.phase_at(12.0) == "w1" and sched.phase_at(99.0) == "w2"
    _assert_lengths(sched, 4, 4)


def test_soak_closed_loop_is_a_cycling_pool():
    sched = build_schedule(soak(10.0, 30.0, concurrency=4, input_tokens=4, output_tokens=4))
    assert not sched.open_loop and sched.cycle and sched.concurrency == 4
    assert sched.duration_s == 30.0 and len(sched.phases) == 3
    assert sched.request(10_000).input_tokens == 4


def test_concurrency_count_mode_is_not_cycled():
    sched = build_schedule(closed(8, num_requests=100, input_tokens=16, output_tokens=2))
    assert not sched.cycle and len(sched.requests) == 100
    assert all(r.at_s is None for r in sched.requests)


_FIXED = {"kind": "fixed", "input_tokens": 1, "output_tokens": 1}


@pytest.mark.parametrize("make", [
    lambda: build_schedule(poisson(1.0)),  # no bound: refused when scheduled
    lambda: Rate.model_validate({}),  # no rate
    lambda: Rate(rate_rps=1.0, process="gamma", cv=0.0),  # no usable gamma cv
    lambda: LoadSpec.model_validate({**soak(3, 9, rate_rps=1.0).model_dump(),
                                     "duration_s": None}),  # a soak without its length
    TraceWindow,  # a trace from nowhere
    lambda: Burst.model_validate({"base_rate_rps": 1.0}),
    lambda: LoadSpec.model_validate({"lengths": _FIXED, "arrival": {"kind": "rate",
                                     "rate_rps": 1.0}, "duration_s": 1, "surprise": 1}),
])
def test_bad_specs_are_rejected(make):
    with pytest.raises((ValidationError, RunnerError)):
        make()


@pytest.fixture(scope="module")
def mooncake_df() -> pd.DataFrame:
    df = pd.read_json(MOONCAKE, lines=True)
    df["arrival_s"] = (df["timestamp"] - df["timestamp"].min()) / 1000.0
    return df.sort_values("arrival_s", kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module")
def mooncake_ws(tmp_path_factory) -> str:
    ws = tmp_path_factory.mktemp("ws") / "w.duckdb"
    build_schedule(loads.trace(path=str(MOONCAKE), workspace=str(ws), num_requests=1))
    return str(ws)


def test_trace_replay_window_and_time_scale(mooncake_df, mooncake_ws):
    start, dur, scale = 100.0, 60.0, 0.5
    sched = build_schedule(loads.trace(workspace=mooncake_ws, start_s=start, duration_s=dur,
                                       time_scale=scale))
    win = mooncake_df[(mooncake_df.arrival_s >= start) & (mooncake_df.arrival_s < start + dur)]
    assert len(sched.requests) == len(win) > 10
    np.testing.assert_allclose(_at(sched), (win.arrival_s.to_numpy() - start) * scale,
                               atol=1e-9)
    np.testing.assert_allclose(np.diff(_at(sched)), np.diff(win.arrival_s.to_numpy()) * scale,
                               atol=1e-9)
    assert [r.input_tokens for r in sched.requests] == win.input_length.tolist()
    assert [r.output_tokens for r in sched.requests] == win.output_length.tolist()
    assert [r.block_hashes for r in sched.requests] == win.hash_ids.tolist()
    assert {r.block_size for r in sched.requests} == {512}
    assert sched.phases[0].end_s == pytest.approx(dur * scale)


def test_trace_replay_request_cap_and_length_caps(mooncake_df, mooncake_ws):
    sched = build_schedule(loads.trace(workspace=mooncake_ws, num_requests=25,
                                       max_input_tokens=1000, max_output_tokens=64))
    head = mooncake_df.head(25)
    assert len(sched.requests) == 25
    assert [r.input_tokens for r in sched.requests] == head.input_length.clip(upper=1000).tolist()
    assert [r.output_tokens for r in sched.requests] == head.output_length.clip(upper=64).tolist()


def test_trace_window_with_no_requests_is_an_error(mooncake_ws):
    with pytest.raises(RunnerError, match="no requests"):
        build_schedule(loads.trace(workspace=mooncake_ws, start_s=1e9))


def test_a_trace_replay_is_predicted_as_sent(mooncake_df, mooncake_ws):
    """`Schedule.load_spec`: the window's requests at their scaled offsets, with the trace's
    prompt block hashes and block size (for the simulator's prefix cache)."""
    start, dur, scale = 100.0, 60.0, 0.5
    sched = build_schedule(loads.trace(workspace=mooncake_ws, start_s=start, duration_s=dur,
                                       time_scale=scale))
    load = sched.load_spec()
    win = mooncake_df[(mooncake_df.arrival_s >= start) & (mooncake_df.arrival_s < start + dur)]
    assert load.arrival is None and load.lengths.kind == "requests"
    np.testing.assert_allclose(load.lengths.at_s, (win.arrival_s.to_numpy() - start) * scale,
                               atol=1e-9)
    assert load.lengths.input_tokens == win.input_length.tolist()
    assert load.lengths.output_tokens == win.output_length.tolist()
    assert load.lengths.block_hashes == win.hash_ids.tolist()
    assert load.lengths.block_size == 512


def test_a_closed_loop_is_predicted_at_its_concurrency():
    sched = build_schedule(closed(3, num_requests=7, input_tokens=40, output_tokens=5))
    load = sched.load_spec()
    assert load.arrival is not None and load.arrival.kind == "closed_loop"
    assert load.arrival.concurrency == 3
    assert load.lengths.at_s is None and load.lengths.input_tokens == [40] * 7
    assert load.lengths.block_hashes is None


@pytest.mark.parametrize(("load", "message"), [
    (closed(2, duration_s=5.0, input_tokens=8, output_tokens=2), "give a request count"),
    (poisson(4.0, num_requests=5, max_in_flight=2, input_tokens=8, output_tokens=2),
     "capped at a concurrency"),
])
def test_what_load_spec_cannot_say_is_a_runner_error(load, message):
    sched = build_schedule(load)
    with pytest.raises(RunnerError, match=message):
        sched.load_spec()


@pytest.mark.parametrize("load", [
    poisson(20.0, num_requests=30, input_tokens=8, output_tokens=2, seed=3),
    closed(3, num_requests=7, input_tokens=40, output_tokens=5),
])
def test_sent_requests_are_sent_again_as_they_were(load):
    """`Schedule.load_spec` and back: the same requests at the same offsets (open loop) or
    the same concurrency (closed loop)."""
    sched = build_schedule(load)
    again = build_schedule(sched.load_spec())
    assert [(r.at_s, r.input_tokens, r.output_tokens) for r in again.requests] == [
        (r.at_s, r.input_tokens, r.output_tokens) for r in sched.requests]
    assert again.concurrency == sched.concurrency


def test_what_bench_cannot_send_is_one_runner_error():
    lengths = DatasetLengths(dataset="sharegpt", input_tokens=100, output_tokens=10)
    with pytest.raises(RunnerError, match="a dataset's length distribution is predict's"):
        build_schedule(LoadSpec(lengths=lengths, arrival=Rate(rate_rps=1.0), num_requests=5))
    with pytest.raises(RunnerError, match="offline load"):
        build_schedule(LoadSpec(lengths=FixedLengths(input_tokens=4, output_tokens=4),
                                arrival=Offline(), num_requests=5))
