"""The Profile view renders the bundled sample with the right figures and charts (AppTest)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from tests import reference as ref
from tests.app.conftest import ENTRY, app_on


def _sample_seconds() -> tuple[pd.DataFrame, np.ndarray]:
    df = pd.read_csv(ref.SAMPLE)
    ts = pd.to_datetime(df["TIMESTAMP"])
    return df, (ts - ts.min()).dt.total_seconds().to_numpy()


def _profile_page() -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=180).run()
    at.switch_page("views/profile.py").run()
    assert not at.exception
    assert not at.error
    return at


def test_headline_figures_of_the_sample(app_home):
    at = _profile_page()
    df, t = _sample_seconds()
    timing = ref.timing(t)
    inp, out = ref.lengths(df["ContextTokens"]), ref.lengths(df["GeneratedTokens"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == f"{len(df):,}"
    assert metrics["Duration"] == f"{timing['duration_s']:,.0f} s"
    assert metrics["Mean QPS"] == f"{timing['mean_qps']:,.2f}"
    assert metrics["Peak QPS (1 s)"] == f"{timing['peak_qps_1s']:,.0f}"
    assert metrics["Peak QPS (60 s)"] == f"{timing['peak_qps_60s']:,.2f}"
    assert metrics["Burstiness (CV)"] == f"{timing['interarrival_cv']:,.2f}"
    assert metrics["Input p50"] == f"{inp['p50']:,.0f}"
    assert metrics["Input p99"] == f"{inp['p99']:,.0f}"
    assert metrics["Output p50"] == f"{out['p50']:,.0f}"
    assert metrics["Output p99"] == f"{out['p99']:,.0f}"
    assert metrics["Multi-turn share"] == "n/a"  # the Azure trace has no sessions
    assert metrics["Prefix reuse"] == "n/a"  # nor prompt blocks


def test_charts_carry_the_trace_figures(app_home):
    at = _profile_page()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [s["layout"]["title"]["text"] for s in specs]
    assert titles[:2] == ["Arrivals per 1 s", "Arrivals per 60 s"]
    assert any(t.startswith("Inter-arrival gaps") for t in titles)
    assert any(t.startswith("Input tokens") for t in titles)
    assert any(t.startswith("Output tokens") for t in titles)
    assert any(t.startswith("Input x output tokens") for t in titles)
    df, t = _sample_seconds()
    per_s = np.bincount(np.floor(t).astype(int))
    assert specs[0]["data"][0]["y"] == per_s.astype(float).tolist()
    heat = next(s for s in specs if s["layout"]["title"]["text"].startswith("Input x output"))
    assert sum(map(sum, heat["data"][0]["z"])) == len(df)
    # no prompt blocks in this trace: the reuse tab says so instead of drawing
    assert any("prefix reuse cannot be measured" in i.value for i in at.info)



def test_concurrent_sessions_share_one_intact_workspace(app_home):
    """Sessions (threads of one server) profiling the same new upload at once: one ingest,
    every session the same figures. Plain threads: AppTest cannot run sessions in parallel."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    import duckdb

    from app.cached import charts_for, profile_for, workspace_for
    from app.storage import store_upload

    path = ref.TRACES / "BurstGPT_1.head400.csv"
    data = path.read_bytes()
    choice = store_upload(io.BytesIO(data), "burst.csv", len(data))

    def session(_: int):
        return profile_for(choice), charts_for(choice)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(session, range(4)))
    n = len(pd.read_csv(path))
    assert all(p.n_requests == n for p, _ in results)
    assert all(r == results[0] for r in results)
    assert sum(results[0][1].input_tokens.counts) + results[0][1].input_tokens.zeros == n
    with duckdb.connect(str(workspace_for(choice).path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == n


def test_reuse_tiles_are_short_with_their_detail_in_help(app_home):
    """A trace with prompt blocks: one tile per LRU size, labels short enough for a tile."""
    import io

    from app.session import TRACE_KEY
    from app.storage import store_upload

    data = (ref.TRACES / "mooncake_conversation_trace.jsonl.gz").read_bytes()
    choice = store_upload(io.BytesIO(data), "mooncake.jsonl.gz", len(data))
    at = app_on("views/profile.py", {TRACE_KEY: choice}, timeout_s=180)
    assert not at.exception and not at.error
    labels = [m.label for m in at.metric]
    # sized in tokens: Mooncake's hash ids stand for blocks of 512 tokens (issue 27)
    assert [x for x in labels if x.startswith("LRU")] == [
        "LRU 512k tok", "LRU 5.12M tok", "LRU 51.2M tok"]
    assert max(map(len, labels)) <= 16
    assert all(m.value == "n/a" or len(m.value) <= 9 for m in at.metric)
    assert all(m.help for m in at.metric)
    assert next(m.help for m in at.metric if m.label == "LRU 5.12M tok").endswith(
        "holding 10,000 blocks of 512 tokens (5,120,000 tokens).")
    assert next(m.value for m in at.metric if m.label == "Prefix reuse").endswith("%")


def test_a_trace_naming_models_gets_a_per_model_table(app_home):
    import io

    from app.session import TRACE_KEY
    from app.storage import store_upload

    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    at = app_on("views/profile.py", {
        TRACE_KEY: store_upload(io.BytesIO(data), "burst.csv", len(data))}, timeout_s=180)
    assert not at.exception and not at.error
    (table,) = [d.value for d in at.dataframe if "model" in d.value.columns]
    counts = pd.read_csv(io.BytesIO(data))["Model"].value_counts()
    assert list(table["model"]) == list(counts.index)
    assert list(table["requests"]) == [f"{n:,}" for n in counts]
