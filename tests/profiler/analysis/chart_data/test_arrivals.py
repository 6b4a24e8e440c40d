"""Arrival series equal per-second and per-minute counts of the trace's timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.analysis.chart_data import arrivals
from tests import reference as ref
from tests.profiler.analysis.chart_data.conftest import profiled_workspace


def test_arrivals_per_second_and_minute(azure):
    charts, profile, _, t = azure
    per_s = np.bincount(np.floor(t).astype(int))
    assert charts.arrivals_1s.bucket_s == 1.0
    assert charts.arrivals_1s.mean_rps == per_s.astype(float).tolist()
    assert max(charts.arrivals_1s.peak_rps) == profile.peak_qps_1s
    per_min = np.bincount(np.floor(t / 60).astype(int))
    assert charts.arrivals_60s.t_s == [60.0 * i for i in range(len(per_min))]
    assert charts.arrivals_60s.mean_rps == pytest.approx(per_min / 60.0)


def test_downsampled_series_keeps_the_peak(azure, monkeypatch, tmp_path):
    _, _, _, t = azure
    ws, _ = profiled_workspace(tmp_path, ref.SAMPLE)
    monkeypatch.setattr(arrivals, "MAX_SERIES_POINTS", 100)
    with ws.connect(read_only=True) as con:
        series = arrivals.arrival_series(con, 1.0)
    per_s = np.bincount(np.floor(t).astype(int))
    k = int(np.ceil(len(per_s) / 100))
    padded = np.pad(per_s, (0, -len(per_s) % k)).reshape(-1, k)
    assert series.bucket_s == k
    assert series.peak_rps == padded.max(axis=1).astype(float).tolist()
    assert series.mean_rps == pytest.approx(padded.sum(axis=1) / k)
