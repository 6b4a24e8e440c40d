"""Chart records equal independent numpy/pandas computations over the real traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis import chart_data as cd
from profiler.analysis.profile import profile_trace
from profiler.workspace import Workspace
from tests import reference as ref

MOONCAKE = ref.TRACES / "mooncake_conversation_trace.jsonl.gz"
SHAREGPT = ref.TRACES / "sharegpt_head1000.json.gz"


def _workspace(tmp_path, trace):
    ws = Workspace.resolve(tmp_path / "ws.duckdb")
    profile = profile_trace(str(trace), workspace=ws)
    return ws, profile


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    ws, profile = _workspace(tmp_path_factory.mktemp("azure"), ref.SAMPLE)
    df = pd.read_csv(ref.SAMPLE)
    ts = pd.to_datetime(df["TIMESTAMP"])
    ns = np.sort((ts - ts.min()).to_numpy().astype("timedelta64[ns]").astype(np.int64))
    return cd.chart_data(ws), profile, df, ns / 1e9


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory):
    ws, profile = _workspace(tmp_path_factory.mktemp("mooncake"), MOONCAKE)
    df = pd.read_json(MOONCAKE, lines=True)
    return cd.chart_data(ws), profile, df


def _log_bins(values, k):
    values = np.asarray(values, dtype=float)
    positive = values[values > 0]
    bins = np.floor(np.log10(positive) * k).astype(int)
    lo = bins.min()
    return lo, np.bincount(bins - lo), int((values <= 0).sum())


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
    ws, _ = _workspace(tmp_path, ref.SAMPLE)
    monkeypatch.setattr(cd, "MAX_SERIES_POINTS", 100)
    with ws.connect(read_only=True) as con:
        series = cd.arrival_series(con, 1.0)
    per_s = np.bincount(np.floor(t).astype(int))
    k = int(np.ceil(len(per_s) / 100))
    padded = np.pad(per_s, (0, -len(per_s) % k)).reshape(-1, k)
    assert series.bucket_s == k
    assert series.peak_rps == padded.max(axis=1).astype(float).tolist()
    assert series.mean_rps == pytest.approx(padded.sum(axis=1) / k)


def test_interarrival_histogram(azure):
    charts, _, _, t = azure
    hist = charts.interarrival_s
    lo, counts, zeros = _log_bins(np.round(np.diff(t), 9), cd.LOG_BINS_PER_DECADE)
    assert hist.zeros == zeros
    assert hist.counts == counts.tolist()
    assert hist.lower[0] == pytest.approx(10 ** (lo / cd.LOG_BINS_PER_DECADE))
    assert hist.total == len(t) - 1
    assert hist.cdf[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("column,source", [("input_tokens", "ContextTokens"),
                                           ("output_tokens", "GeneratedTokens")])
def test_length_histograms_and_cdf(azure, column, source):
    charts, _, df, _ = azure
    hist = getattr(charts, column)
    values = df[source].to_numpy()
    lo, counts, zeros = _log_bins(values, cd.LOG_BINS_PER_DECADE)
    assert (hist.zeros, hist.counts) == (zeros, counts.tolist())
    for upper, cdf in zip(hist.upper, hist.cdf, strict=True):
        # every token count is an integer, so "below the upper edge" is unambiguous
        assert cdf == pytest.approx((values < upper).mean())
    assert hist.lower[0] == pytest.approx(10 ** (lo / cd.LOG_BINS_PER_DECADE))


def test_length_heatmap(mooncake):
    charts, _, df = mooncake
    k = cd.HEATMAP_BINS_PER_DECADE
    x = np.floor(np.log10(np.maximum(df["input_length"], 1)) * k).astype(int)
    y = np.floor(np.log10(np.maximum(df["output_length"], 1)) * k).astype(int)
    expected = pd.crosstab(y, x).reindex(index=range(y.min(), y.max() + 1),
                                         columns=range(x.min(), x.max() + 1), fill_value=0)
    assert charts.lengths_2d.counts == expected.to_numpy().tolist()
    assert charts.lengths_2d.x_lower[0] == pytest.approx(10 ** (x.min() / k))


def test_reuse_curve_matches_a_plain_lru(mooncake):
    charts, _, df = mooncake
    curve = charts.prefix_reuse
    blocks = list(df["hash_ids"])
    distinct = len({b for req in blocks for b in req})
    assert curve.distinct_blocks == distinct
    assert curve.capacity_blocks[-1] == distinct
    assert curve.block_size == 512
    assert curve.infinite_hit_ratio == pytest.approx(ref.infinite_reuse(blocks))
    assert curve.hit_ratio[-1] == pytest.approx(curve.infinite_hit_ratio)
    for capacity in (100, 1_000, 10_000):
        i = curve.capacity_blocks.index(capacity)
        assert curve.hit_ratio[i] == pytest.approx(ref.lru_reuse(blocks, capacity))
    assert curve.hit_ratio == sorted(curve.hit_ratio)  # a bigger LRU never hits less here


def test_reuse_capacities_grid():
    assert cd.reuse_capacities(7) == [7]
    assert cd.reuse_capacities(120) == [10, 20, 50, 100, 120]
    assert cd.reuse_capacities(100) == [10, 20, 50, 100]


def test_untimed_trace_has_no_arrival_charts(tmp_path):
    ws, _ = _workspace(tmp_path, SHAREGPT)
    charts = cd.chart_data(ws)
    assert charts.arrivals_1s is None and charts.arrivals_60s is None
    assert charts.interarrival_s is None
    assert charts.prefix_reuse is not None and charts.prefix_reuse.block_size == 16


def test_segment_outlines_are_two_sigma_ellipses(mooncake):
    _, profile, _ = mooncake
    outlines = cd.segment_outlines(profile.segments)
    assert len(outlines) == len(profile.segments)
    for seg, outline in zip(profile.segments, outlines, strict=True):
        pts = np.log1p(np.array([outline.input_tokens, outline.output_tokens])).T
        delta = pts - [seg.log_input_mean, seg.log_output_mean]
        inv = np.linalg.inv(np.array(seg.log_cov))
        mahalanobis = np.sqrt(np.einsum("ij,jk,ik->i", delta, inv, delta))
        assert mahalanobis == pytest.approx(np.full(len(pts), cd.OUTLINE_SIGMAS))
        assert outline.share == seg.share


def test_unknown_length_column_is_refused(mooncake, tmp_path):
    ws, _ = _workspace(tmp_path, ref.SAMPLE)
    with ws.connect(read_only=True) as con, pytest.raises(ValueError, match="column"):
        cd.length_histogram(con, "arrival_s; DROP TABLE requests")


def test_per_model_split_of_burstgpt(tmp_path):
    """Issue 27: BurstGPT names each request's model (ChatGPT, GPT-4): the split per model."""
    df = pd.read_csv(ref.TRACES / "BurstGPT_1.head400.csv")
    ws, _ = _workspace(tmp_path, ref.TRACES / "BurstGPT_1.head400.csv")
    got = cd.chart_data(ws).models
    counts = df["Model"].value_counts()
    assert [m.model for m in got] == list(counts.index)
    for m in got:
        rows = df[df["Model"] == m.model]
        assert m.requests == len(rows)
        assert m.share == pytest.approx(len(rows) / len(df))
        assert m.input_tokens_p50 == pytest.approx(rows["Request tokens"].median())
        assert m.output_tokens_total == rows["Response tokens"].sum()


def test_one_model_or_none_has_no_split(azure):
    charts, *_ = azure
    assert charts.models is None
