"""`profiler.synthesis.synth`: synthetic traces re-profile like their source, and are written
safely.

Sources are real traces (Azure conv, Mooncake conversation, BurstGPT_3 with sessions). Each
synthetic file is read back with pyarrow/pandas and checked against independent computations
(`tests.reference`) and against a re-profile through the normal ingest path.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import UsageError
from profiler.analysis.profile import profile_trace
from profiler.ingestion.ingest import ingest
from profiler.synthesis import synth
from profiler.synthesis.sessions import DEFAULT_MEAN_TURNS
from profiler.synthesis.synth import SynthSummary, synthesize
from profiler.workspace import Workspace
from tests import reference as ref

N = 50_000
SOURCES = {
    "azure_conv": ref.SAMPLE,
    "mooncake": ref.TRACES / "mooncake_conversation_trace.jsonl.gz",
    "burstgpt_3": ref.TRACES / "BurstGPT_3.head400.csv",
}
SCHEMA = pa.schema([
    ("request_id", pa.int64()),
    ("arrival_s", pa.float64()),
    ("input_tokens", pa.int32()),
    ("output_tokens", pa.int32()),
    ("session_id", pa.string()),
    ("model", pa.string()),
    ("block_hashes", pa.list_(pa.uint64())),
    ("block_size", pa.int32()),
    ("status", pa.string()),
    ("tokens_estimated", pa.bool_()),
])


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    ws = tmp_path_factory.mktemp("src")
    return {name: profile_trace(str(path), workspace=Workspace.resolve(ws / f"{name}.duckdb"))
            for name, path in SOURCES.items()}


@pytest.fixture(scope="module")
def synthetic(profiles, tmp_path_factory):
    """name -> (summary, table read back, re-profile) for N requests, seed 0."""
    out = tmp_path_factory.mktemp("synth")
    result = {}
    for name, source in profiles.items():
        path = out / f"{name}.parquet"
        summary = synthesize(source, n_requests=N, out_path=str(path))
        again = profile_trace(str(path), workspace=Workspace.resolve(out / f"{name}.duckdb"))
        result[name] = (summary, pq.read_table(path), again)
    return result


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# --- the file --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SOURCES))
def test_file_is_the_canonical_table(synthetic, name):
    summary, table, _ = synthetic[name]
    assert table.schema.remove_metadata() == SCHEMA
    assert table.num_rows == N == summary.n_requests
    assert table.column("request_id").to_numpy().tolist() == list(range(N))
    t = table.column("arrival_s").to_numpy()
    assert t[0] == 0.0 and np.all(np.diff(t) >= 0)
    assert summary.duration_s == pytest.approx(t[-1])
    for column in ("model", "status"):
        assert table.column(column).null_count == N
    assert not table.column("tokens_estimated").to_numpy(zero_copy_only=False).any()
    assert summary.notes and all(isinstance(n, str) and n for n in summary.notes)


def test_no_reuse_and_no_sessions_mean_null_columns(synthetic):
    summary, table, _ = synthetic["azure_conv"]
    assert summary.block_size is None
    for column in ("session_id", "block_hashes", "block_size"):
        assert table.column(column).null_count == N


def test_round_trip_is_detected_as_servefit(synthetic, tmp_path):
    summary, _, _ = synthetic["mooncake"]
    result = ingest(summary.out_path, Workspace.resolve(tmp_path / "ws.duckdb"))
    assert result.format.kind == "servefit"
    assert result.n_requests == N


# --- shape of the source, re-profiled --------------------------------------------------------


@pytest.mark.parametrize("name", list(SOURCES))
def test_rates_match_the_source(profiles, synthetic, name):
    src, (_, table, again) = profiles[name], synthetic[name]
    mine = ref.timing(table.column("arrival_s").to_numpy())
    assert _rel(mine["mean_qps"], src.mean_qps) < 0.03
    assert _rel(again.mean_qps, src.mean_qps) < 0.03
    assert _rel(again.interarrival_cv, src.interarrival_cv) < 0.15
    assert _rel(mine["peak_to_mean_60s"], src.peak_to_mean_60s) < 0.15
    assert _rel(again.peak_to_mean_60s, src.peak_to_mean_60s) < 0.15


@pytest.mark.parametrize("name", list(SOURCES))
@pytest.mark.parametrize("side", ["input_tokens", "output_tokens"])
def test_length_percentiles_match_the_source(profiles, synthetic, name, side):
    src, (_, table, again) = profiles[name], synthetic[name]
    mine = ref.lengths(table.column(side).to_numpy())
    want = getattr(src, side)
    for q in ("p50", "p90"):
        assert _rel(mine[q], getattr(want, q)) < 0.10, q
        assert _rel(getattr(getattr(again, side), q), getattr(want, q)) < 0.10, q
    assert want.min <= mine["min"] and mine["max"] <= want.max


def test_sessions_match_the_source(profiles, synthetic):
    src, (_, table, again) = profiles["burstgpt_3"], synthetic["burstgpt_3"]
    sessions = table.column("session_id").to_pandas()
    assert sessions.notna().all()
    assert abs(ref.multi_turn_share(sessions) - src.multi_turn_share) < 0.05
    assert abs(again.multi_turn_share - src.multi_turn_share) < 0.05
    turns = sessions.value_counts()
    assert turns[turns >= 2].mean() == pytest.approx(DEFAULT_MEAN_TURNS, rel=0.1)


def test_mean_turns_is_honoured(profiles, tmp_path):
    path = tmp_path / "s.parquet"
    synthesize(profiles["burstgpt_3"], n_requests=20_000, out_path=str(path), mean_turns=8)
    turns = pd.read_parquet(path, columns=["session_id"])["session_id"].value_counts()
    assert turns.min() >= 1 and turns[turns >= 2].min() >= 2
    assert turns[turns >= 2].mean() == pytest.approx(8, rel=0.1)


def test_prefix_reuse_matches_the_source(profiles, synthetic):
    src, (summary, table, again) = profiles["mooncake"], synthetic["mooncake"]
    assert summary.block_size == 512
    assert set(table.column("block_size").to_numpy().tolist()) == {512}
    hashes = table.column("block_hashes").to_pylist()
    inputs = table.column("input_tokens").to_numpy()
    assert [len(h) for h in hashes] == [math.ceil(i / 512) for i in inputs]
    assert abs(ref.infinite_reuse(hashes) - src.prefix_reuse_infinite) < 0.05
    assert abs(again.prefix_reuse_infinite - src.prefix_reuse_infinite) < 0.05
    assert set(again.prefix_reuse_lru) == set(src.prefix_reuse_lru)  # values are not fitted


def test_sessions_with_prefix_reuse(tmp_path):
    """ShareGPT (no timestamps, sessions, text-derived blocks): later turns reuse their session's
    earlier prompts, and the overall reuse and multi-turn share match the source."""
    src = profile_trace(str(ref.TRACES / "sharegpt_head1000.json.gz"),
                        workspace=Workspace.resolve(tmp_path / "ws.duckdb"))
    path = tmp_path / "s.parquet"
    summary = synthesize(src, n_requests=20_000, out_path=str(path), rate_rps=3.0)
    assert summary.block_size == src.format.block_size
    frame = pd.read_parquet(path, columns=["session_id", "block_hashes"])
    assert abs(ref.multi_turn_share(frame["session_id"]) - src.multi_turn_share) < 0.05
    seen: set = set()
    by_session: dict = {}
    total = hits = local = 0
    for sid, blocks in zip(frame["session_id"], frame["block_hashes"], strict=True):
        mine = by_session.setdefault(sid, set())
        total += len(blocks)
        hits += sum(b in seen for b in blocks)
        local += sum(b in mine for b in blocks)
        seen.update(blocks)
        mine.update(blocks)
    assert abs(hits / total - src.prefix_reuse_infinite) < 0.05
    assert local > hits / 2


def test_hashes_are_prefix_chained(synthetic):
    """Equal hash => equal prefix: a hash always follows the same previous hash."""
    _, table, _ = synthetic["mooncake"]
    blocks = table.column("block_hashes")
    flat = np.asarray(blocks.combine_chunks().flatten(), dtype=np.uint64)
    offsets = np.asarray(blocks.combine_chunks().offsets)
    first = np.zeros(len(flat), dtype=bool)
    first[offsets[:-1][np.diff(offsets) > 0]] = True
    prev = np.concatenate([np.zeros(1, np.uint64), flat[:-1]])
    prev[first] = 0  # no block before the first (0 is not a hash here)
    assert not (flat == 0).any()
    frame = pd.DataFrame({"h": flat, "prev": prev})
    assert frame.groupby("h")["prev"].nunique().max() == 1
    assert frame["h"].duplicated().any()  # and some prefixes really are shared


def test_rate_scale_scales_the_rate_not_the_shape(profiles, tmp_path):
    src = profiles["azure_conv"]
    path = tmp_path / "x2.parquet"
    synthesize(src, n_requests=N, out_path=str(path), rate_scale=2.0)
    mine = ref.timing(pd.read_parquet(path, columns=["arrival_s"])["arrival_s"].to_numpy())
    assert _rel(mine["mean_qps"], 2 * src.mean_qps) < 0.03
    assert _rel(mine["peak_to_mean_60s"], src.peak_to_mean_60s) < 0.15


def test_profile_without_arrivals_needs_a_rate(profiles, tmp_path):
    untimed = profiles["azure_conv"].model_copy(update={
        "duration_s": None, "mean_qps": None, "peak_qps_1s": None, "peak_qps_60s": None,
        "peak_to_mean_1s": None, "peak_to_mean_60s": None, "interarrival_cv": None,
        "rate_series": None,
    })
    path = tmp_path / "p.parquet"
    with pytest.raises(UsageError, match="no arrival times"):
        synthesize(untimed, n_requests=100, out_path=str(path))
    assert not path.exists()
    synthesize(untimed, n_requests=N, out_path=str(path), rate_rps=4.0)
    mine = ref.timing(pd.read_parquet(path, columns=["arrival_s"])["arrival_s"].to_numpy())
    assert _rel(mine["mean_qps"], 4.0) < 0.03
    assert mine["interarrival_cv"] == pytest.approx(1.0, abs=0.05)  # Poisson


# --- determinism -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SOURCES))
def test_same_seed_same_bytes_other_seed_other_bytes(profiles, tmp_path, name):
    paths = [tmp_path / f"{i}.parquet" for i in range(3)]
    for path, seed in zip(paths, (7, 7, 8), strict=True):
        synthesize(profiles[name], n_requests=5_000, out_path=str(path), seed=seed)
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b
    assert a != c


def test_chunk_boundaries_keep_the_table_whole(profiles, tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "CHUNK_ROWS", 1_000)
    monkeypatch.setattr(synth, "MAX_CHUNK_BLOCKS", 5_000)
    path = tmp_path / "c.parquet"
    synthesize(profiles["mooncake"], n_requests=6_500, out_path=str(path))
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups > 6
    table = pq.read_table(path)
    assert table.column("request_id").to_numpy().tolist() == list(range(6_500))
    assert np.all(np.diff(table.column("arrival_s").to_numpy()) >= 0)
    hashes = table.column("block_hashes").to_pylist()
    inputs = table.column("input_tokens").to_numpy()
    assert [len(h) for h in hashes] == [math.ceil(i / 512) for i in inputs]


# --- failures leave nothing behind -----------------------------------------------------------


def test_failed_write_leaves_no_file(profiles, tmp_path, monkeypatch):
    def fail(self, table, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", fail)
    path = tmp_path / "t.parquet"
    with pytest.raises(UsageError, match="No space left"):
        synthesize(profiles["azure_conv"], n_requests=1_000, out_path=str(path))
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_keeps_the_old_file(profiles, tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"old")

    def interrupt(self, table, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pq.ParquetWriter, "write_table", interrupt)
    with pytest.raises(KeyboardInterrupt):
        synthesize(profiles["azure_conv"], n_requests=1_000, out_path=str(path))
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]
    assert path.read_bytes() == b"old"


def test_output_path_that_is_a_directory(profiles, tmp_path):
    target = tmp_path / "dir.parquet"
    target.mkdir()
    with pytest.raises(UsageError, match="cannot write"):
        synthesize(profiles["azure_conv"], n_requests=100, out_path=str(target))
    assert [p.name for p in tmp_path.iterdir()] == ["dir.parquet"]
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("kwargs", [
    {"n_requests": 0},
    {"n_requests": -5},
    {"n_requests": 2.5},
    {"n_requests": True},
    {"rate_scale": 0},
    {"rate_scale": -1.0},
    {"rate_scale": float("nan")},
    {"rate_scale": float("inf")},
    {"rate_scale": 1e300},  # overflowed the envelope and hung
    {"rate_scale": 1001.0},  # past the cap: 1e5 took minutes and 2 GB for 10 requests
    {"rate_rps": 0.0},
    {"rate_rps": 2e6},
    {"mean_turns": 1.5},
])
def test_bad_arguments_raise_usage_error(profiles, tmp_path, kwargs):
    path = tmp_path / "bad.parquet"
    args = {"n_requests": 10, "out_path": str(path)} | kwargs
    with pytest.raises(UsageError):
        synthesize(profiles["azure_conv"], **args)
    assert not path.exists()


def test_missing_directory_is_a_usage_error(profiles, tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        synthesize(profiles["azure_conv"], n_requests=10,
                   out_path=str(tmp_path / "no" / "such" / "t.parquet"))


def test_summary_is_a_strict_record(synthetic):
    summary, _, _ = synthetic["mooncake"]
    assert SynthSummary.model_validate(summary.model_dump()) == summary
    with pytest.raises(ValueError, match="extra"):
        SynthSummary.model_validate(summary.model_dump() | {"surprise": 1})
