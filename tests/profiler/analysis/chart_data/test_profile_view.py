"""The Profile view's chart records of a trace without timestamps."""

from __future__ import annotations

from profiler.analysis.chart_data.profile_view import chart_data
from tests.profiler.analysis.chart_data.conftest import SHAREGPT, profiled_workspace


def test_untimed_trace_has_no_arrival_charts(tmp_path):
    ws, _ = profiled_workspace(tmp_path, SHAREGPT)
    charts = chart_data(ws)
    assert charts.arrivals_1s is None and charts.arrivals_60s is None
    assert charts.interarrival_s is None
    assert charts.prefix_reuse is not None and charts.prefix_reuse.block_size == 16
