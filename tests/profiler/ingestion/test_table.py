"""Tests for profiler/ingestion/table.py: --map applies over an auto-detected format (it
was dropped: `--map input=GeneratedTokens` on an Azure trace ingested ContextTokens, and a
mapped column the file lacks passed silently)."""

from __future__ import annotations

import pytest

from core.errors import UsageError
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{s:02d}.0,{100 + s},{7 + s}\n" for s in range(5))


def test_a_map_over_a_detected_format_is_applied(tmp_path):
    trace = tmp_path / "azure.csv"
    trace.write_text(AZURE)
    ws = Workspace(tmp_path / "ws.duckdb")
    result = ingest(str(trace), workspace=ws,
                    options=IngestOptions(column_map={"input": "GeneratedTokens"}))
    assert result.format.columns["input"] == "GeneratedTokens"


def test_a_mapped_column_the_file_lacks_is_refused(tmp_path):
    trace = tmp_path / "azure.csv"
    trace.write_text(AZURE)
    with pytest.raises(UsageError, match="no column 'nope'"):
        ingest(str(trace), workspace=Workspace(tmp_path / "ws.duckdb"),
               options=IngestOptions(column_map={"input": "nope"}))
