"""Validate view: benchmark the recommended configuration live and compare with the prediction."""

from __future__ import annotations

import streamlit as st

from app.resources import RECOMMENDATION_KEY, current_trace


def render() -> None:
    st.title("Validate")
    rec = st.session_state.get(RECOMMENDATION_KEY)
    if rec is None:
        st.info("Get a recommendation first (Recommend), then benchmark it here.")
        return
    st.caption(f"Trace: {current_trace().name}; config: {rec.pick.label}")


render()
