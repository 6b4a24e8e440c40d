"""Traces profiled once for the chart-record tests: each fixture is the chart records of a real
trace, its profile and the trace read independently with pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.chart_data.profile_view import chart_data
from profiler.analysis.profile import profile_trace
from profiler.workspace import Workspace
from tests import reference as ref

MOONCAKE = ref.TRACES / "mooncake_conversation_trace.jsonl.gz"
SHAREGPT = ref.TRACES / "sharegpt_head1000.json.gz"


def profiled_workspace(tmp_path, trace):
    ws = Workspace.resolve(tmp_path / "ws.duckdb")
    profile = profile_trace(str(trace), workspace=ws)
    return ws, profile


@pytest.fixture(scope="package")
def azure(tmp_path_factory):
    ws, profile = profiled_workspace(tmp_path_factory.mktemp("azure"), ref.SAMPLE)
    df = pd.read_csv(ref.SAMPLE)
    ts = pd.to_datetime(df["TIMESTAMP"])
    ns = np.sort((ts - ts.min()).to_numpy().astype("timedelta64[ns]").astype(np.int64))
    return chart_data(ws), profile, df, ns / 1e9


@pytest.fixture(scope="package")
def mooncake(tmp_path_factory):
    ws, profile = profiled_workspace(tmp_path_factory.mktemp("mooncake"), MOONCAKE)
    df = pd.read_json(MOONCAKE, lines=True)
    return chart_data(ws), profile, df
