"""The canonical Parquet copy reads back, with no options, as the very same requests."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from core.errors import WorkspaceError
from profiler.ingestion.canonical import write_canonical
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace
from tests import reference as ref


def _requests(ws: Workspace) -> pd.DataFrame:
    with duckdb.connect(str(ws.path), read_only=True) as con:
        return con.execute("SELECT * FROM requests ORDER BY request_id").df()


@pytest.mark.parametrize("trace,options", [
    ("mooncake_conversation_trace.jsonl.gz", IngestOptions()),  # block hashes
    ("BurstGPT_3.head400.csv", IngestOptions()),  # sessions, models, failures
])
def test_round_trip(tmp_path, trace, options):
    source = Workspace(tmp_path / "a.duckdb")
    ingest(str(ref.TRACES / trace), source, options)
    out = write_canonical(source, tmp_path / "out" / "trace.parquet")
    again = Workspace(tmp_path / "b.duckdb")
    info = ingest(str(out), again).format
    assert info.kind == "servefit"
    left, right = _requests(source), _requests(again)
    pd.testing.assert_frame_equal(left.drop(columns="block_hashes"),
                                  right.drop(columns="block_hashes"))
    def hashes(frame):
        return [list(h) if isinstance(h, (list, tuple)) or hasattr(h, "tolist") else None
                for h in frame["block_hashes"]]

    assert hashes(left) == hashes(right)
    assert any(h is not None for h in hashes(left)) == trace.startswith("mooncake")
    assert sorted(p.name for p in out.parent.iterdir()) == ["trace.parquet"]


def test_mapped_columns_survive(tmp_path):
    df = pd.read_csv(ref.TRACES / "BurstGPT_1.head400.csv").rename(
        columns={"Timestamp": "when", "Request tokens": "q", "Response tokens": "a"})
    path = tmp_path / "renamed.csv"
    df.to_csv(path, index=False)
    source = Workspace(tmp_path / "a.duckdb")
    ingest(str(path), source, IngestOptions(column_map={"time": "when", "input": "q",
                                                        "output": "a"}))
    again = Workspace(tmp_path / "b.duckdb")
    ingest(str(write_canonical(source, tmp_path / "c.parquet")), again)
    right = _requests(again)
    assert right["input_tokens"].tolist() == df.sort_values("when", kind="stable")["q"].tolist()


def test_missing_workspace(tmp_path):
    with pytest.raises(WorkspaceError):
        write_canonical(Workspace(tmp_path / "none.duckdb"), tmp_path / "x.parquet")
