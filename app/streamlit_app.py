"""Streamlit entrypoint: the page frame and the router (`streamlit run app/streamlit_app.py`).

Run from the repository root with the root on PYTHONPATH (scripts/run_app.sh and the Docker
image do this). Each view is one file in app/views/; they share the chosen trace through
st.session_state (app.session).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

# Absolute: the script may be started by a relative path (the Docker CMD).
VIEWS = Path(__file__).resolve().parent / "views"
PAGES = (
    ("start.py", "Start", ":material/upload_file:"),
    ("profile.py", "Profile", ":material/monitoring:"),
    ("recommend.py", "Recommend", ":material/recommend:"),
    ("validate.py", "Validate", ":material/speed:"),
    ("runs.py", "Runs", ":material/history:"),
)


def run() -> None:
    """Build the navigation; a function so tests can drive it."""
    st.set_page_config(page_title="ServeFit", page_icon="⚡", layout="wide")
    page = st.navigation([
        st.Page(VIEWS / file, title=title, icon=icon, default=i == 0)
        for i, (file, title, icon) in enumerate(PAGES)
    ])
    page.run()


run()
