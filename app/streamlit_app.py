"""Streamlit entrypoint: the page frame and the router (`streamlit run app/streamlit_app.py`).

Run from the repository root with the root on PYTHONPATH (scripts/run_app.sh does this).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

VIEWS = Path(__file__).parent / "views"


def run() -> None:
    """Build the navigation; a function so tests can drive it."""
    st.set_page_config(page_title="ServeFit", page_icon=":material/speed:", layout="wide")
    page = st.navigation(
        [st.Page(VIEWS / "profile.py", title="Profile", icon=":material/monitoring:",
                 default=True)]
    )
    page.run()


run()
