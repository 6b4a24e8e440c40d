"""Log-binned histograms and the length heatmap equal numpy/pandas binnings of the traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.chart_data.distributions import (
    HEATMAP_BINS_PER_DECADE,
    LOG_BINS_PER_DECADE,
    length_histogram,
)
from tests import reference as ref
from tests.profiler.analysis.chart_data.conftest import profiled_workspace


def _log_bins(values, k):
    values = np.asarray(values, dtype=float)
    positive = values[values > 0]
    bins = np.floor(np.log10(positive) * k).astype(int)
    lo = bins.min()
    return lo, np.bincount(bins - lo), int((values <= 0).sum())


def test_interarrival_histogram(azure):
    charts, _, _, t = azure
    hist = charts.interarrival_s
    lo, counts, zeros = _log_bins(np.round(np.diff(t), 9), LOG_BINS_PER_DECADE)
    assert hist.zeros == zeros
    assert hist.counts == counts.tolist()
    assert hist.lower[0] == pytest.approx(10 ** (lo / LOG_BINS_PER_DECADE))
    assert hist.total == len(t) - 1
    assert hist.cdf[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("column,source", [("input_tokens", "ContextTokens"),
                                           ("output_tokens", "GeneratedTokens")])
def test_length_histograms_and_cdf(azure, column, source):
    charts, _, df, _ = azure
    hist = getattr(charts, column)
    values = df[source].to_numpy()
    lo, counts, zeros = _log_bins(values, LOG_BINS_PER_DECADE)
    assert (hist.zeros, hist.counts) == (zeros, counts.tolist())
    for upper, cdf in zip(hist.upper, hist.cdf, strict=True):
        # every token count is an integer, so "below the upper edge" is unambiguous
        assert cdf == pytest.approx((values < upper).mean())
    assert hist.lower[0] == pytest.approx(10 ** (lo / LOG_BINS_PER_DECADE))


def test_length_heatmap(mooncake):
    charts, _, df = mooncake
    k = HEATMAP_BINS_PER_DECADE
    x = np.floor(np.log10(np.maximum(df["input_length"], 1)) * k).astype(int)
    y = np.floor(np.log10(np.maximum(df["output_length"], 1)) * k).astype(int)
    expected = pd.crosstab(y, x).reindex(index=range(y.min(), y.max() + 1),
                                         columns=range(x.min(), x.max() + 1), fill_value=0)
    assert charts.lengths_2d.counts == expected.to_numpy().tolist()
    assert charts.lengths_2d.x_lower[0] == pytest.approx(10 ** (x.min() / k))


def test_unknown_length_column_is_refused(mooncake, tmp_path):
    ws, _ = profiled_workspace(tmp_path, ref.SAMPLE)
    with ws.connect(read_only=True) as con, pytest.raises(ValueError, match="column"):
        length_histogram(con, "arrival_s; DROP TABLE requests")
