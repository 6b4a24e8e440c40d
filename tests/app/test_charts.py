"""The charts' axes read right: what issue 27 saw in the browser, checked on the figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from app import charts
from profiler.chart_data import LogHistogram
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
