"""Column names of real trace files, for the app's mapping form."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from core.errors import TraceError
from profiler.ingestion.columns import trace_columns
from tests import reference as ref


def test_csv_and_compressed_jsonl_columns():
    burst = ref.TRACES / "BurstGPT_3.head400.csv"
    assert trace_columns(str(burst)) == list(pd.read_csv(burst).columns)
    mooncake = ref.TRACES / "mooncake_conversation_trace.jsonl.gz"
    assert trace_columns(str(mooncake)) == list(pd.read_json(mooncake, lines=True).columns)


def test_parquet_columns(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"when": [0.0, 1.0], "q_len": [3, 4], "a_len": [5, 6]}).to_parquet(path)
    assert trace_columns(str(path)) == ["when", "q_len", "a_len"]


def test_unreadable_file_is_a_trace_error(tmp_path):
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(gzip.compress(b"a,b\n1,2\n")[:-8])  # truncated
    with pytest.raises(TraceError):
        trace_columns(str(path))
    with pytest.raises(TraceError, match="no such file"):
        trace_columns(str(tmp_path / "missing.csv"))
