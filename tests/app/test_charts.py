"""The charts' axes read right: what issue 27 saw in the browser, checked on the figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app import charts
from profiler.analysis.chart_data.distributions import LogHistogram
from tests import reference as ref


def _histogram(values: np.ndarray, per_decade: int = 10) -> LogHistogram:
    positive = values[values > 0]
    k = np.floor(np.log10(positive) * per_decade).astype(int)
    bins = np.arange(k.min(), k.max() + 1)
    counts = np.array([(k == b).sum() for b in bins])
    return LogHistogram(bins_per_decade=per_decade, total=len(values),
                        zeros=int((values <= 0).sum()),
                        lower=list(10.0 ** (bins / per_decade)),
                        upper=list(10.0 ** ((bins + 1) / per_decade)),
                        counts=[int(c) for c in counts],
                        cdf=list((np.cumsum(counts) + (values <= 0).sum()) / len(values)))


def test_the_cdf_axis_has_quartile_ticks():
    """Plotly aligned the CDF's ticks with the counts' grid: 0.307, 0.615, 0.922."""
    tokens = pd.read_csv(ref.TRACES / "BurstGPT_1.head400.csv")["Request tokens"].to_numpy()
    fig = charts.log_histogram(_histogram(tokens.astype(float)), "Input tokens", "tokens")
    cdf_axis = fig.layout.yaxis2
    assert list(cdf_axis.tickvals) == [0, 0.25, 0.5, 0.75, 1]
    assert list(cdf_axis.range) == [0, 1] and cdf_axis.tickformat == ".0%"
    assert fig.data[1].y[-1] == 1.0  # the CDF's last step is every request


def _curve(label: str, points: list[tuple[float, float, float, bool]]):
    from core.capacity import LoadCurve, LoadPoint

    return LoadCurve(label=label, points=[
        LoadPoint(multiple=r, rate_rps=r, ttft_p95_s=t, tpot_p95_s=o, holds=h)
        for r, t, o, h in points], slo_ttft_s=0.5, slo_tpot_s=0.05, mean_rps=1.0,
        peak_rps=2.0, boundary_rps=4.0)


def test_the_load_curve_draws_each_engines_best_beside_the_pick():
    pick = _curve("vllm tp1", [(1, 0.1, 0.01, True), (4, 0.3, 0.03, True),
                               (8, 2.0, 0.09, False)])
    other = _curve("sglang tp1", [(1, 0.12, 0.012, True), (2, 0.4, 0.04, True),
                                  (4, 0.9, 0.07, False)])
    fig = charts.load_curve(pick, others=[other])
    dashed = [t for t in fig.data if t.line.dash == "dash"]
    assert [t.name for t in dashed] == ["sglang tp1", "sglang tp1"]  # TTFT and TPOT panels
    assert list(dashed[0].y) == [120.0, 400.0, 900.0] and list(dashed[1].x) == [1, 2, 4]
    mine = [t for t in fig.data if t.name == "the pick: vllm tp1"]
    assert len(mine) == 2 and [t.showlegend for t in mine] == [True, False]
    assert fig.layout.showlegend
    alone = charts.load_curve(pick)
    assert not alone.layout.showlegend and all(t.line.dash != "dash" for t in alone.data)
