"""Every profile figure on every real trace equals an independent pandas/numpy computation."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from core.errors import TraceError
from profiler.analysis.profile import compute_profile, profile_trace
from profiler.workspace import Workspace
from tests import reference as ref

REL = 1e-6
LRU_CAPACITIES = [100, 1_000, 10_000]


def _raw_azure(path):
    df = pd.read_csv(path)
    ts = pd.to_datetime(df["TIMESTAMP"])
    t = (ts - ts.min()).dt.total_seconds().to_numpy()
    return {"t": t, "input": df["ContextTokens"].to_numpy(),
            "output": df["GeneratedTokens"].to_numpy()}


def _raw_burstgpt(path):
    df = pd.read_csv(path)
    raw = {"t": df["Timestamp"].to_numpy(float), "input": df["Request tokens"].to_numpy(),
           "output": df["Response tokens"].to_numpy()}
    if "Session ID" in df:
        raw["sessions"] = df["Session ID"]
    return raw


def _raw_mooncake(path):
    df = pd.read_json(path, lines=True)
    return {"t": df["timestamp"].to_numpy(float) / 1000.0, "input": df["input_length"].to_numpy(),
            "output": df["output_length"].to_numpy(), "blocks": list(df["hash_ids"])}


TRACES = {
    "azure_code": (ref.TRACES / "AzureLLMInferenceTrace_code.csv", _raw_azure),
    "azure_conv": (ref.SAMPLE, _raw_azure),
    "burstgpt_1": (ref.TRACES / "BurstGPT_1.head400.csv", _raw_burstgpt),
    "burstgpt_3": (ref.TRACES / "BurstGPT_3.head400.csv", _raw_burstgpt),
    "mooncake_conversation": (ref.TRACES / "mooncake_conversation_trace.jsonl.gz", _raw_mooncake),
    "mooncake_synthetic": (ref.TRACES / "mooncake_synthetic_trace.jsonl.gz", _raw_mooncake),
}


def _expected(raw: dict) -> dict:
    n = len(raw["input"])
    idx = ref.order(raw.get("t"), n)
    exp = ref.timing(raw["t"]) if raw.get("t") is not None else {"n_requests": n}
    exp["input_tokens"] = ref.lengths(raw["input"])
    exp["output_tokens"] = ref.lengths(raw["output"])
    sessions = raw.get("sessions")
    exp["multi_turn_share"] = None if sessions is None else ref.multi_turn_share(sessions)
    if raw.get("blocks") is not None:
        blocks = [raw["blocks"][i] for i in idx]
        exp["prefix_reuse_infinite"] = ref.infinite_reuse(blocks)
        exp["prefix_reuse_lru"] = {str(c): ref.lru_reuse(blocks, c) for c in LRU_CAPACITIES}
    else:
        exp["prefix_reuse_infinite"] = None
        exp["prefix_reuse_lru"] = None
    return exp


def _assert_close(actual, expected, path=""):
    if isinstance(expected, dict):
        assert set(expected) <= set(actual), path
        for key, value in expected.items():
            _assert_close(actual[key], value, f"{path}.{key}")
    elif expected is None:
        assert actual is None, path
    else:
        assert actual == pytest.approx(float(expected), rel=REL), path


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """name -> (workspace, profile) of every trace, profiled once for the module; the
    workspaces are only read after that."""
    out = {}
    for name, (path, _) in TRACES.items():
        ws = Workspace.resolve(tmp_path_factory.mktemp(name) / "ws.duckdb")
        out[name] = ws, profile_trace(str(path), workspace=ws, lru_capacities=LRU_CAPACITIES)
    return out


@pytest.fixture(scope="module")
def profiles(profiled):
    return {name: prof for name, (_, prof) in profiled.items()}


@pytest.mark.parametrize("name", list(TRACES))
def test_figures_equal_independent_computation(profiles, name):
    path, reader = TRACES[name]
    expected = _expected(reader(path))
    _assert_close(profiles[name].model_dump(), expected)


@pytest.mark.parametrize("name", list(TRACES))
def test_a_clock_coarser_than_the_per_second_figures_is_said(profiles, name):
    """Issue 27: Mooncake's conversation trace stamps arrivals in 3 s steps (90 % of them at
    the instant of the one before), so its 1 s peak and CV are the clock's; the others not."""
    path, reader = TRACES[name]
    gaps = np.diff(reader(path)["t"])
    step, tied = gaps[gaps > 0].min(), (gaps == 0).mean()
    said = [w for w in profiles[name].warnings if "arrival times come in steps" in w]
    if step >= 1.0 and tied >= 0.5:
        assert len(said) == 1 and f"steps of {step:,.4g} s" in said[0], said
        assert f"{tied:.0%} of requests" in said[0] and "the 1 s peak" in said[0]
    else:
        assert not said, said
    if name == "mooncake_conversation":
        assert said  # the case this rule is for


@pytest.mark.parametrize("name", list(TRACES))
def test_rate_series_counts_every_request(profiles, name):
    path, reader = TRACES[name]
    raw = reader(path)
    series = profiles[name].rate_series
    t = raw["t"] - raw["t"].min()
    counts = np.bincount(np.floor(t / series.window_s).astype(np.int64))
    assert series.requests == counts.tolist()
    assert series.t_s == [i * series.window_s for i in range(len(counts))]
    assert sum(series.input_tokens) == int(np.sum(raw["input"]))


@pytest.mark.parametrize("name", list(TRACES))
def test_segments_partition_the_trace(profiles, name):
    prof = profiles[name]
    assert sum(s.n_requests for s in prof.segments) == prof.n_requests
    assert sum(s.share for s in prof.segments) == pytest.approx(1.0)
    assert [s.input_tokens_p50 for s in prof.segments] == sorted(
        s.input_tokens_p50 for s in prof.segments) or len(prof.segments) == 1


def test_published_mooncake_reuse_figures(profiles):
    # The trace's README: 36.6 % of blocks seen before; 21.1 % with a 10,000-block LRU
    # (one decimal, so within 0.1 percentage point).
    prof = profiles["mooncake_conversation"]
    assert prof.prefix_reuse_infinite == pytest.approx(0.366, abs=1e-3)
    assert prof.prefix_reuse_lru["10000"] == pytest.approx(0.211, abs=1e-3)


def test_detected_formats(profiles):
    kinds = {name: p.format.kind for name, p in profiles.items()}
    assert kinds == {"azure_code": "azure", "azure_conv": "azure", "burstgpt_1": "burstgpt",
                     "burstgpt_3": "burstgpt", "mooncake_conversation": "mooncake",
                     "mooncake_synthetic": "mooncake"}
    assert profiles["mooncake_conversation"].format.block_size == 512


def test_burstgpt_zero_token_rows_are_failures_and_kept(tmp_path):
    path = ref.TRACES / "BurstGPT_1.head400.csv"
    ws = Workspace.resolve(tmp_path / "ws.duckdb")
    prof = profile_trace(str(path), workspace=ws, lru_capacities=[])
    df = pd.read_csv(path)
    assert prof.n_requests == len(df)
    with ws.connect(read_only=True) as con:
        failures = con.execute(
            "SELECT count(*) FROM requests WHERE status = 'failure'").fetchone()[0]
    assert failures == int((df["Response tokens"] == 0).sum())


@pytest.fixture(scope="module")
def sharegpt(tmp_path_factory):
    path = ref.TRACES / "sharegpt_head1000.json.gz"
    ws = Workspace.resolve(tmp_path_factory.mktemp("sharegpt") / "ws.duckdb")
    prof = profile_trace(str(path), workspace=ws, lru_capacities=[1_000, 100_000])
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        expected = ref.sharegpt_requests(json.load(fh))
    return prof, expected, ws


def test_sharegpt_each_human_turn_is_a_request(sharegpt):
    prof, exp, _ = sharegpt
    _assert_close(prof.model_dump(), {
        "n_requests": len(exp),
        "input_tokens": ref.lengths(exp["input"]),
        "output_tokens": ref.lengths(exp["output"]),
        "multi_turn_share": ref.multi_turn_share(exp["session"]),
        "prefix_reuse_infinite": ref.infinite_reuse(list(exp["blocks"])),
        "prefix_reuse_lru": {"1000": ref.lru_reuse(list(exp["blocks"]), 1_000),
                             "100000": ref.lru_reuse(list(exp["blocks"]), 100_000)},
    })


def test_sharegpt_arrivals_undefined_and_said_so(sharegpt):
    prof, _, ws = sharegpt
    assert prof.format.arrivals == "undefined"
    assert prof.duration_s is None and prof.mean_qps is None and prof.rate_series is None
    assert any("no timestamps" in w for w in prof.warnings)
    assert prof.format.tokens_estimated
    with ws.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM requests WHERE arrival_s IS NOT NULL"
                           ).fetchone()[0] == 0


def test_profile_is_recomputable_from_workspace(profiles, tmp_path):
    path, _ = TRACES["burstgpt_3"]
    ws = Workspace.resolve(tmp_path / "ws.duckdb")
    first = profile_trace(str(path), workspace=ws)
    assert compute_profile(ws) == first


@pytest.mark.parametrize("batch_rows", [1, 7, 64])
@pytest.mark.parametrize("name", ["azure_code", "burstgpt_1", "mooncake_synthetic"])
def test_rate_figures_do_not_depend_on_the_scan_batches(profiled, monkeypatch, name, batch_rows):
    """The 1 s / 60 s peaks and the rate series stream over batches; runs cross batch edges.
    The batches are the profile's scans of the workspace: the trace ingested once is profiled
    again at each batch size."""
    import profiler.analysis.scans as scans_module

    monkeypatch.setattr(scans_module, "RATE_BATCH_ROWS", batch_rows)
    path, reader = TRACES[name]
    raw = reader(path)
    prof = compute_profile(profiled[name][0], lru_capacities=[])
    expected = ref.timing(raw["t"])
    for key in ("peak_qps_1s", "peak_qps_60s", "peak_to_mean_1s", "peak_to_mean_60s"):
        assert getattr(prof, key) == pytest.approx(expected[key], rel=REL), key
    t = raw["t"] - raw["t"].min()
    window = prof.rate_series.window_s
    w = np.floor(t / window).astype(np.int64)
    assert prof.rate_series.requests == np.bincount(w).tolist()
    assert prof.rate_series.input_tokens == np.bincount(w, weights=raw["input"]).astype(
        int).tolist()
    assert prof.rate_series.output_tokens == np.bincount(w, weights=raw["output"]).astype(
        int).tolist()


def test_rate_figures_of_a_table_out_of_arrival_order(tmp_path):
    """A workspace table not stored in arrival order (the rows under the `requests` view
    shuffled here) still gets the right peaks and rate series."""
    path, reader = TRACES["burstgpt_3"]
    raw = reader(path)
    ws = Workspace.resolve(tmp_path / "ws.duckdb")
    profile_trace(str(path), workspace=ws, lru_capacities=[])
    with ws.connect() as con:
        con.execute("CREATE OR REPLACE TABLE requests_rows AS SELECT * FROM requests_rows "
                    "ORDER BY hash(request_id)")
        stored = np.array([r[0] for r in con.execute("SELECT arrival_s FROM requests")
                           .fetchall()])
    assert np.any(np.diff(stored) < 0)  # really out of order
    prof = compute_profile(ws, lru_capacities=[])
    expected = ref.timing(raw["t"])
    assert prof.peak_qps_1s == pytest.approx(expected["peak_qps_1s"], rel=REL)
    assert prof.peak_qps_60s == pytest.approx(expected["peak_qps_60s"], rel=REL)
    t = raw["t"] - raw["t"].min()
    counts = np.bincount(np.floor(t / prof.rate_series.window_s).astype(np.int64))
    assert prof.rate_series.requests == counts.tolist()


def test_a_profile_never_imports_pandas(tmp_path):
    """The cold path needs no pandas: importing it (pyarrow's `to_numpy` does) was 0.3 s of a
    3 s profile of 10 M requests, the margin over a pandas script (bench/profile_speed.py)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    code = ("import sys\nfrom profiler.analysis.profile import profile_trace\n"
            "from pathlib import Path\nfrom profiler.workspace import Workspace\n"
            f"profile_trace({str(TRACES['azure_conv'][0])!r}, "
            f"workspace=Workspace(Path({str(tmp_path / 'w.duckdb')!r})))\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                         timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_a_span_of_millennia_keeps_the_rate_series_small_and_says_so(tmp_path):
    """Two requests dated 1970 and 9999 wrote a 142 MB profile of daily windows."""
    path = tmp_path / "dates.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n"
                    "1970-01-01T00:00:00,10,5\n9999-12-31T00:00:00,12,6\n")
    prof = profile_trace(str(path), workspace=Workspace(tmp_path / "w.duckdb"),
                         lru_capacities=[])
    span = (pd.Timestamp("9999-12-31") - pd.Timestamp("1970-01-01")).total_seconds()
    assert prof.duration_s == pytest.approx(span)
    series = prof.rate_series
    assert series is not None and len(series.t_s) <= 2_000
    assert series.window_s % 86_400 == 0 and series.window_s * 2_000 >= span
    assert sum(series.requests) == 2
    assert any("8,030 years" in w for w in prof.warnings)


@pytest.mark.parametrize("late", ["1e17", "1e300"])
def test_a_span_no_clock_means_is_one_line(tmp_path, late):
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,input_tokens,output_tokens\n0,10,5\n{late},12,6\n")
    with pytest.raises(TraceError, match=r"arrival times span 1e\+(17|300) s: no trace's clock"):
        profile_trace(str(path), workspace=Workspace(tmp_path / "w.duckdb"), lru_capacities=[])


def test_a_request_longer_than_any_context_is_its_row_named(tmp_path):
    """2^31 - 1 tokens fit the column but overflowed the profile's sums (a traceback, rc 1)."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1,2147483647,6\n")
    with pytest.raises(TraceError, match=r"row 2, column 'input_tokens': '2147483647' is not a "
                       r"whole token count from 0 to 10,000,000"):
        profile_trace(str(path), workspace=Workspace(tmp_path / "w.duckdb"), lru_capacities=[])
