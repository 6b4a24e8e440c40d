"""The Profile view renders the bundled sample with the right headline figures (AppTest)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from tests import reference as ref

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


def test_profile_view_shows_sample_headline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the app's workspaces go under the working directory
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    assert not at.exception
    df = pd.read_csv(ref.SAMPLE)
    timing = ref.timing(
        (pd.to_datetime(df["TIMESTAMP"]) - pd.Timestamp(0)).dt.total_seconds().to_numpy())
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == f"{len(df):,}"
    assert metrics["Mean QPS"] == f"{timing['mean_qps']:,.2f}"
    assert metrics["Peak QPS (1 s)"] == f"{timing['peak_qps_1s']:,.0f}"
    assert not at.error
