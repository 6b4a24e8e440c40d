"""The Runs view lists what earlier sessions profiled and recommended, after a restart, and
what other sessions did only when the deployment shares the history (issue 16 F8)."""

from __future__ import annotations

import threading

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.session import RECOMMENDATION_KEY, TRACE_KEY
from tests import reference as ref
from tests.app.conftest import ENTRY
from tests.app.test_recommend_view import recommend_on_sample


def _runs_page() -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=180).run()
    at.switch_page("views/runs.py").run()
    assert not at.exception and not at.error
    return at


def test_empty_store(app_home):
    at = _runs_page()
    assert [i.value for i in at.info] == ["No trace profiled yet.", "No recommendation yet.",
                                          "No benchmark run yet (see Validate)."]


def test_history_survives_a_restart(app_home, monkeypatch):
    monkeypatch.setenv("SERVEFIT_SHARED_HISTORY", "1")  # the restarted app is a new session
    first = recommend_on_sample(max_requests=200)  # what is stored, not the search, is tested
    rec = first.session_state[RECOMMENDATION_KEY]
    st.cache_data.clear()  # a restart: nothing left in memory, only the store on disk
    st.cache_resource.clear()
    at = _runs_page()
    traces = next(t.value for t in at.dataframe if "trace" in t.value.columns)
    assert list(traces["trace"]) == [ref.SAMPLE.name]
    assert list(traces["requests"]) == [len(pd.read_csv(ref.SAMPLE))]
    recs = next(t.value for t in at.dataframe if "recommendation" in t.value.columns)
    assert len(recs) == 1 and recs["recommendation"][0].startswith(rec.pick.label)
    next(b for b in at.button if b.label == "Open it in Recommend").click().run()
    assert at.session_state[RECOMMENDATION_KEY] == rec
    next(b for b in at.button if b.label == "Work on this trace").click().run()
    assert at.session_state[TRACE_KEY].digest == first.session_state[TRACE_KEY].digest


def test_opening_a_recommendation_works_on_its_trace(app_home):
    """A session on another trace that opens the sample's recommendation works on the sample
    again, so Recommend shows the pick with the trace it was made on."""
    first = recommend_on_sample(max_requests=200)  # what is stored, not the search, is tested
    rec = first.session_state[RECOMMENDATION_KEY]
    at = first
    at.switch_page("views/start.py").run()
    at.file_uploader[0].set_value(("burst.csv", (ref.TRACES / "BurstGPT_1.head400.csv")
                                   .read_bytes(), "text/csv")).run()
    assert at.session_state[TRACE_KEY].name == "burst.csv"
    at.switch_page("views/runs.py").run()
    next(b for b in at.button if b.label == "Open it in Recommend").click().run()
    assert not at.exception and not at.error
    assert at.session_state[TRACE_KEY].sample
    at.switch_page("views/recommend.py").run()
    assert any(s.value == f"Pick: {rec.pick.config.engine} — {rec.pick.label}"
               for s in at.subheader)
    assert ref.SAMPLE.name in at.caption[0].value.replace("\\", "")  # Markdown-escaped


def _upload(name: str, data: bytes) -> AppTest:
    """A browser session that uploads a trace (and so profiles it)."""
    at = AppTest.from_file(str(ENTRY), default_timeout=180).run()
    at.file_uploader[0].set_value((name, data, "text/csv")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def _listed_traces(at: AppTest) -> list[str]:
    at.switch_page("views/runs.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    tables = [t.value for t in at.dataframe if "trace" in t.value.columns
              and "requests" in t.value.columns]
    return list(tables[0]["trace"]) if tables else []


def test_a_session_sees_only_its_own_history_by_default(app_home):
    mine = _upload("alice-prod.csv", (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes())
    other = AppTest.from_file(str(ENTRY), default_timeout=180).run()
    assert _listed_traces(other) == []
    assert "No trace profiled yet." in [i.value for i in other.info]
    assert _listed_traces(mine) == ["alice-prod.csv"]


def test_a_deployment_can_share_the_history(app_home, monkeypatch):
    _upload("alice-prod.csv", (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes())
    monkeypatch.setenv("SERVEFIT_SHARED_HISTORY", "yes")
    other = AppTest.from_file(str(ENTRY), default_timeout=180).run()
    assert _listed_traces(other) == ["alice-prod.csv"]


def test_a_bad_sharing_setting_is_one_line(app_home, monkeypatch):
    monkeypatch.setenv("SERVEFIT_SHARED_HISTORY", "maybe")
    at = AppTest.from_file(str(ENTRY), default_timeout=180).run()
    at.switch_page("views/runs.py").run()
    assert not at.exception
    assert len(at.error) == 1 and "SERVEFIT\\_SHARED\\_HISTORY" in at.error[0].value


@pytest.mark.parametrize("attempt", range(3))
def test_two_sessions_uploading_the_same_file_at_once(app_home, attempt):
    """F6: one of two sessions got DuckDB's "different configuration than existing
    connections" (or a write-write conflict) when both read the same content at once.

    The two sessions are two threads calling what the Start view calls on an upload
    (`store_upload`, then `profile_for`'s cached ingest); Streamlit's AppTest is not made to
    run two scripts at once in one process (its runtime is process-wide), so driving it from
    two threads failed by itself now and then."""
    import io

    from app.cached import _profile
    from app.storage import store_upload

    data = (ref.TRACES / "BurstGPT_3.head400.csv").read_bytes()
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def session(name: str) -> None:
        choice = store_upload(io.BytesIO(data), name, len(data))
        barrier.wait(30)
        try:
            outcomes[name] = (choice.name, _profile(choice.key(),
                                                    choice.model_dump_json()).n_requests)
        except Exception as exc:  # what the view would have shown
            outcomes[name] = exc

    threads = [threading.Thread(target=session, args=(n,)) for n in ("a.csv", "b.csv")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    rows = len(pd.read_csv(ref.TRACES / "BurstGPT_3.head400.csv"))
    assert outcomes == {"a.csv": ("a.csv", rows), "b.csv": ("b.csv", rows)}
