"""Tests for recommender/decision/capacity/fleet.py: the replicas per window of the user's own
arrivals at the pick's boundary (checked against pandas on the bundled sample), hourly windows
for long traces, the GPU-hours against a fleet sized for the peak, and the headroom."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.capacity import Boundary
from core.capacity_text import day_gpus_text, day_text
from profiler.analysis.profile import profile_trace
from profiler.schema import RateSeries
from profiler.workspace import Workspace
from recommender.decision.capacity.fleet import FEW_WINDOWS, MAX_WINDOWS, plan_day

ROOT = Path(__file__).resolve().parents[4]
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"


def _boundary(rate_rps: float, replicas: int = 1, gpus: int = 1) -> Boundary:
    return Boundary(label="pick", engine="vllm", replicas=replicas, gpus=gpus,
                    rate_rps=rate_rps, multiple_of_mean=1.0, multiple_of_peak=None,
                    binding="compute", simulations=8)


def test_the_samples_windows_match_pandas(tmp_path):
    profile = profile_trace(str(SAMPLE), workspace=Workspace(tmp_path / "ws.duckdb"))
    # TP2 replicas of 2 GPUs holding 3 req/s each: 6 req/s over 2 replicas
    day = plan_day(profile.rate_series, profile.duration_s, _boundary(6.0, 2, 4))
    assert day is not None and day.per_replica_rps == pytest.approx(3.0)
    t = pd.to_datetime(pd.read_csv(SAMPLE)["TIMESTAMP"])
    seconds = (t - t.min()).dt.total_seconds()
    span = seconds.max()
    # under two hours: the span in about FEW_WINDOWS windows of whole rate-series windows
    width = day.window_s
    assert width >= span / FEW_WINDOWS and width % profile.rate_series.window_s == 0
    counts = np.bincount(np.floor(seconds / width).astype(int))
    assert [w.t_s for w in day.windows] == pytest.approx([k * width for k in range(len(counts))])
    durations = [min(width, span - k * width) for k in range(len(counts))]
    rates = counts / np.array(durations)
    assert [w.rate_rps for w in day.windows] == pytest.approx(list(rates), rel=1e-3)
    replicas = [max(1, math.ceil(r / 3.0)) for r in rates]
    assert [w.replicas for w in day.windows] == replicas
    assert [w.gpus for w in day.windows] == [2 * r for r in replicas]
    hours = np.array(durations) / 3600
    assert day.gpu_hours == pytest.approx(float(np.sum(np.array(replicas) * 2 * hours)),
                                          rel=1e-3)
    assert day.peak_fleet_gpus == 2 * max(replicas)
    assert day.peak_fleet_gpu_hours == pytest.approx(2 * max(replicas) * hours.sum(), rel=1e-3)
    assert day.min_headroom == pytest.approx(min(np.array(replicas) * 3.0 / rates), rel=1e-3)
    assert f"{len(counts)} windows of" in day_text(day)


def test_a_long_trace_is_planned_by_the_hour_and_a_quiet_hour_keeps_one_replica():
    # Six hours in one-minute windows: 600 req/h, then a silent hour, then 3,600 req/h.
    per_minute = [10] * 120 + [0] * 60 + [60] * 180
    t = [60.0 * k for k, n in enumerate(per_minute) if n]
    series = RateSeries(window_s=60.0, t_s=t, requests=[n for n in per_minute if n],
                        input_tokens=[0] * len(t), output_tokens=[0] * len(t))
    day = plan_day(series, 6 * 3600.0, _boundary(0.4))
    assert day is not None and day.window_s == 3600.0
    assert [w.rate_rps for w in day.windows] == pytest.approx([1 / 6, 1 / 6, 0, 1, 1, 1])
    assert [w.replicas for w in day.windows] == [1, 1, 1, 3, 3, 3]
    assert day.windows[2].headroom is None
    assert day.gpu_hours == pytest.approx(12.0) and day.peak_fleet_gpu_hours == pytest.approx(18.0)
    assert day.min_headroom == pytest.approx(1.2)
    assert "33% less" in day_text(day)
    assert day_gpus_text(day) == "1 ×3, 3 ×3"  # one GPU per replica, runs coded


def test_no_series_or_no_boundary_makes_no_plan():
    series = RateSeries(window_s=1.0, t_s=[0.0], requests=[1], input_tokens=[1],
                        output_tokens=[1])
    assert plan_day(None, 10.0, _boundary(1.0)) is None
    assert plan_day(series, None, _boundary(1.0)) is None
    assert plan_day(series, 10.0, _boundary(0.0)) is None


def test_a_trace_spanning_decades_gets_at_most_a_month_of_windows():
    # Two requests 30 years apart made one window per hour: 262,945 windows, a 48 MB plan.
    span = 30 * 365.25 * 86400.0
    series = RateSeries(window_s=60.0, t_s=[0.0, span - 60.0], requests=[1, 1],
                        input_tokens=[1, 1], output_tokens=[1, 1])
    day = plan_day(series, span, _boundary(1.0))
    assert day is not None and MAX_WINDOWS == 744
    hours = math.ceil(span / 3600 / 744)  # whole hours per window: 354
    assert day.window_s == hours * 3600.0
    assert len(day.windows) == math.ceil(span / (hours * 3600.0)) <= 744
    assert sum(w.duration_s for w in day.windows) == pytest.approx(span)
