"""Fixtures for the Streamlit AppTests: a fresh app home and empty Streamlit caches."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


@pytest.fixture
def app_home(tmp_path, monkeypatch):
    """The app's store under tmp_path; caches cleared so nothing leaks between tests."""
    home = tmp_path / "app-home"
    monkeypatch.setenv("SERVEFIT_APP_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    st.cache_data.clear()
    st.cache_resource.clear()
    yield home
    st.cache_data.clear()
    st.cache_resource.clear()


# The real vLLM CPU server (slow tests only): the runners' fixtures, shared here so the browser
# test can validate against it.
from tests.runners.conftest import tiny_model_dir, vllm_url  # noqa: E402, F401
