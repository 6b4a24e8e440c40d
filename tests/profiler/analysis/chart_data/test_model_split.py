"""The per-model split equals pandas' counts per model of a trace that names them."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler.analysis.chart_data.profile_view import chart_data
from tests import reference as ref
from tests.profiler.analysis.chart_data.conftest import profiled_workspace


def test_per_model_split_of_burstgpt(tmp_path):
    """Issue 27: BurstGPT names each request's model (ChatGPT, GPT-4): the split per model."""
    df = pd.read_csv(ref.TRACES / "BurstGPT_1.head400.csv")
    ws, _ = profiled_workspace(tmp_path, ref.TRACES / "BurstGPT_1.head400.csv")
    got = chart_data(ws).models
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
