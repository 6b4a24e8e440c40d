"""Tests for recommender/workload.py: the `requests` table as simulator input.

Expected arrays come from an independent pandas read of the same DuckDB table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.ingestion.ingest import ingest
from profiler.workspace import Workspace
from recommender.sim.trace_window import head_window, load_workload, replica_share, take

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl.gz"
BURSTGPT = TRACES / "BurstGPT_1.head400.csv"


def _ingested(tmp_path: Path, trace: Path) -> tuple[Workspace, pd.DataFrame]:
    ws = Workspace(tmp_path / "ws.duckdb")
    ingest(str(trace), ws)
    with ws.connect(read_only=True) as con:
        frame = con.execute("SELECT * FROM requests ORDER BY request_id").df()
    return ws, frame


def _valid(frame: pd.DataFrame) -> pd.DataFrame:
    ok = (frame["arrival_s"].notna() & (frame["input_tokens"] >= 1)
          & (frame["output_tokens"] >= 1) & (frame["status"].fillna("") != "failure"))
    return frame[ok].reset_index(drop=True)


def _expected_hashes(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    lists = [list(h) if h is not None else [] for h in rows["block_hashes"]]
    flat = np.array([x for h in lists for x in h], dtype=np.uint64)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in lists])])
    return flat, offsets


def test_whole_trace_matches_a_pandas_read(tmp_path: Path) -> None:
    ws, frame = _ingested(tmp_path, MOONCAKE)
    rows = _valid(frame)
    w = load_workload(ws, max_requests=10**9)
    req = w.requests
    assert w.n == len(rows) and w.dropped == len(frame) - len(rows)
    np.testing.assert_allclose(req.arrival_s, rows["arrival_s"] - rows["arrival_s"].iloc[0])
    np.testing.assert_array_equal(req.input_tokens, rows["input_tokens"])
    np.testing.assert_array_equal(req.output_tokens, rows["output_tokens"])
    flat, offsets = _expected_hashes(rows)
    np.testing.assert_array_equal(req.block_offsets, offsets)
    np.testing.assert_array_equal(req.block_hashes, flat)
    assert req.block_size == int(frame["block_size"].dropna().iloc[0]) == 512
    assert w.has_hashes


def test_large_trace_keeps_the_busiest_window(tmp_path: Path) -> None:
    ws, frame = _ingested(tmp_path, MOONCAKE)
    rows, n = _valid(frame), 500
    t = rows["arrival_s"].to_numpy()
    spans = t[n - 1:] - t[: len(t) - n + 1]
    start = int(np.flatnonzero(spans == spans.min())[0])  # earliest of the shortest spans
    expected = rows.iloc[start:start + n]
    w = load_workload(ws, max_requests=n)
    assert w.n == n and "busiest 500" in w.description
    np.testing.assert_allclose(w.requests.arrival_s, t[start:start + n] - t[start])
    np.testing.assert_array_equal(w.requests.input_tokens, expected["input_tokens"])
    flat, offsets = _expected_hashes(expected)
    np.testing.assert_array_equal(w.requests.block_hashes, flat)
    np.testing.assert_array_equal(w.requests.block_offsets, offsets)
    assert w.rate_rps == pytest.approx(n / spans.min())


def test_failed_and_zero_token_rows_are_left_out(tmp_path: Path) -> None:
    ws, frame = _ingested(tmp_path, BURSTGPT)
    rows = _valid(frame)
    assert len(rows) < len(frame)  # BurstGPT logs failures as zero-token rows
    w = load_workload(ws, max_requests=10**9)
    assert w.dropped == len(frame) - len(rows) and w.n == len(rows)
    assert not w.has_hashes
    np.testing.assert_array_equal(w.requests.output_tokens, rows["output_tokens"])
    assert f"{w.dropped:,} failed or zero-token rows" in w.description


def test_take_cuts_hashes_per_request(tmp_path: Path) -> None:
    ws, frame = _ingested(tmp_path, MOONCAKE)
    req = load_workload(ws, max_requests=10**9).requests
    rows = _valid(frame)
    index = np.array([3, 7, 8, 100, 2000])
    part = take(req, index, rebase=False)
    flat, offsets = _expected_hashes(rows.iloc[index])
    np.testing.assert_array_equal(part.block_hashes, flat)
    np.testing.assert_array_equal(part.block_offsets, offsets)
    share = replica_share(req, 4)
    np.testing.assert_array_equal(share.input_tokens, rows["input_tokens"].to_numpy()[::4])
    window = head_window(req, 300)
    assert len(window.arrival_s) == 300 and window.arrival_s[0] == 0.0
