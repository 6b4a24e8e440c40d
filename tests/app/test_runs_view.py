"""The Runs view lists what earlier sessions profiled and recommended, after a restart."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.resources import RECOMMENDATION_KEY, TRACE_KEY
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


def test_history_survives_a_restart(app_home):
    first = recommend_on_sample()
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
