"""Workload schedules: arrival processes against independent numpy draws and statistics, burst
and soak phases, closed-loop pools, and trace replay (window, time scale, lengths, block hashes)
against a real Mooncake trace read with pandas.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from core.errors import RunnerError
from runners.workloads import WORKLOADS, WorkloadSpec, build_schedule

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl.gz"


def _at(schedule) -> np.ndarray:
    return np.array([r.at_s for r in schedule.requests])


def test_every_kind_is_a_plugin():
    assert set(WORKLOADS) == {"trace", "poisson", "gamma", "concurrency", "burst", "soak"}


def test_poisson_count_mode_matches_numpy_draws():
    spec = WorkloadSpec(kind="poisson", rate_rps=50.0, num_requests=500, prompt_tokens=10,
                        output_tokens=5, seed=7)
    expected = np.cumsum(np.random.default_rng(7).exponential(1 / 50.0, 500))
    sched = build_schedule(spec)
    np.testing.assert_allclose(_at(sched), expected, rtol=0, atol=1e-12)
    assert [r.index for r in sched.requests] == list(range(500))
    assert {(r.input_tokens, r.output_tokens) for r in sched.requests} == {(10, 5)}
    assert sched.open_loop and sched.concurrency is None


def test_poisson_duration_mode_rate_and_window():
    sched = build_schedule(WorkloadSpec(kind="poisson", rate_rps=200.0, duration_s=60.0,
                                        prompt_tokens=8, output_tokens=8, seed=3))
    at = _at(sched)
    # Conditioned on its count (exactly rate x duration), a Poisson process's arrival times
    # are sorted independent uniforms over the window.
    expected = np.sort(np.random.default_rng(3).uniform(0.0, 60.0, 12_000))
    np.testing.assert_allclose(at, expected, rtol=0, atol=1e-12)
    assert np.all(np.diff(at) > 0) and at[0] > 0 and at[-1] < 60.0
    gaps = np.diff(at)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV 1
    # The gaps are exponential with mean 1/rate: the KS distance to that law is small.
    cdf = 1.0 - np.exp(-200.0 * np.sort(gaps))
    assert np.max(np.abs(cdf - np.arange(1, len(gaps) + 1) / len(gaps))) < 0.02


def test_poisson_seed_changes_and_repeats():
    def at(seed):
        return _at(build_schedule(WorkloadSpec(kind="poisson", rate_rps=10, num_requests=50,
                                               prompt_tokens=1, output_tokens=1, seed=seed)))
    np.testing.assert_array_equal(at(1), at(1))
    assert not np.array_equal(at(1), at(2))


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_cv_and_mean(cv):
    sched = build_schedule(WorkloadSpec(kind="gamma", rate_rps=100.0, gamma_cv=cv,
                                        num_requests=40_000, prompt_tokens=4, output_tokens=4))
    gaps = np.diff(np.concatenate([[0.0], _at(sched)]))
    assert gaps.mean() == pytest.approx(0.01, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)
    shape = 1 / cv**2
    expected = np.random.default_rng(0).gamma(shape, 1 / (100.0 * shape), 40_000)
    np.testing.assert_allclose(gaps, expected, rtol=1e-9, atol=1e-12)


def test_burst_phases_rates_and_order():
    spec = WorkloadSpec(kind="burst", base_rate_rps=20.0, peak_rate_rps=200.0, steady_s=30.0,
                        burst_s=10.0, prompt_tokens=4, output_tokens=4)
    sched = build_schedule(spec)
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [
        ("steady", 0.0, 30.0), ("burst", 30.0, 40.0), ("recovery", 40.0, 70.0)]
    df = pd.DataFrame({"at": _at(sched), "phase": [r.phase for r in sched.requests]})
    assert df["at"].is_monotonic_increasing
    bounds = {"steady": (0, 30), "burst": (30, 40), "recovery": (40, 70)}
    for name, (lo, hi) in bounds.items():
        part = df[df.phase == name]
        assert part["at"].between(lo, hi, inclusive="left").all()
        expected = (20.0 if name != "burst" else 200.0) * (hi - lo)
        assert len(part) == expected, name  # each phase offers exactly its rate


def test_soak_open_loop_windows():
    sched = build_schedule(WorkloadSpec(kind="soak", rate_rps=50.0, duration_s=25.0,
                                        window_s=10.0, prompt_tokens=4, output_tokens=4))
    assert [(p.name, p.start_s, p.end_s) for p in sched.phases] == [
        ("w0", 0.0, 10.0), ("w1", 10.0, 20.0), ("w2", 20.0, 25.0)]
    for r in sched.requests:
        k = int(r.at_s // 10.0)
        assert r.phase == f"w{k}"
    assert sched.phase_at(12.0) == "w1" and sched.phase_at(99.0) == "w2"


def test_soak_closed_loop_is_a_cycling_pool():
    sched = build_schedule(WorkloadSpec(kind="soak", concurrency=4, duration_s=30.0,
                                        window_s=10.0, prompt_tokens=4, output_tokens=4))
    assert not sched.open_loop and sched.cycle and sched.concurrency == 4
    assert sched.duration_s == 30.0 and len(sched.phases) == 3
    assert sched.request(10_000).input_tokens == 4


def test_concurrency_count_mode_is_not_cycled():
    sched = build_schedule(WorkloadSpec(kind="concurrency", concurrency=8, num_requests=100,
                                        prompt_tokens=16, output_tokens=2))
    assert not sched.cycle and len(sched.requests) == 100
    assert all(r.at_s is None for r in sched.requests)


@pytest.mark.parametrize("fields", [
    {"kind": "poisson", "rate_rps": 1.0, "prompt_tokens": 1, "output_tokens": 1},  # no bound
    {"kind": "poisson", "duration_s": 1.0, "prompt_tokens": 1, "output_tokens": 1},  # no rate
    {"kind": "gamma", "rate_rps": 1.0, "duration_s": 1, "prompt_tokens": 1, "output_tokens": 1},
    {"kind": "soak", "rate_rps": 1.0, "concurrency": 2, "duration_s": 9, "window_s": 3,
     "prompt_tokens": 1, "output_tokens": 1},
    {"kind": "trace"},
    {"kind": "burst", "base_rate_rps": 1.0, "prompt_tokens": 1, "output_tokens": 1},
    {"kind": "poisson", "rate_rps": 1.0, "duration_s": 1, "prompt_tokens": 1,
     "output_tokens": 1, "surprise": 1},
])
def test_bad_specs_are_rejected(fields):
    with pytest.raises(ValidationError):
        WorkloadSpec(**fields)


@pytest.fixture(scope="module")
def mooncake_df() -> pd.DataFrame:
    df = pd.read_json(MOONCAKE, lines=True)
    df["arrival_s"] = (df["timestamp"] - df["timestamp"].min()) / 1000.0
    return df.sort_values("arrival_s", kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module")
def mooncake_ws(tmp_path_factory) -> str:
    ws = tmp_path_factory.mktemp("ws") / "w.duckdb"
    build_schedule(WorkloadSpec(kind="trace", trace_path=str(MOONCAKE), workspace=str(ws),
                                num_requests=1))
    return str(ws)


def test_trace_replay_window_and_time_scale(mooncake_df, mooncake_ws):
    start, dur, scale = 100.0, 60.0, 0.5
    sched = build_schedule(WorkloadSpec(kind="trace", workspace=mooncake_ws, start_s=start,
                                        duration_s=dur, time_scale=scale))
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
    sched = build_schedule(WorkloadSpec(kind="trace", workspace=mooncake_ws, num_requests=25,
                                        max_prompt_tokens=1000, max_output_tokens=64))
    head = mooncake_df.head(25)
    assert len(sched.requests) == 25
    assert [r.input_tokens for r in sched.requests] == head.input_length.clip(upper=1000).tolist()
    assert [r.output_tokens for r in sched.requests] == head.output_length.clip(upper=64).tolist()


def test_trace_window_with_no_requests_is_an_error(mooncake_ws):
    with pytest.raises(RunnerError, match="no requests"):
        build_schedule(WorkloadSpec(kind="trace", workspace=mooncake_ws, start_s=1e9))
