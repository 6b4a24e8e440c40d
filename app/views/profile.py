"""Profile view: pick the bundled sample or upload a trace, see its load profile."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from app.resources import SAMPLE_TRACE, profile_file
from profiler.errors import ServeFitError
from profiler.schema import Profile


def _fmt(value: float | None, spec: str = "{:,.2f}") -> str:
    return "n/a" if value is None else spec.format(value)


def _headline(p: Profile) -> None:
    cols = st.columns(5)
    cols[0].metric("Requests", f"{p.n_requests:,}")
    cols[1].metric("Duration", _fmt(p.duration_s, "{:,.0f} s"))
    cols[2].metric("Mean QPS", _fmt(p.mean_qps))
    cols[3].metric("Peak QPS (1 s)", _fmt(p.peak_qps_1s, "{:,.0f}"))
    cols[4].metric("Inter-arrival CV", _fmt(p.interarrival_cv))
    cols = st.columns(5)
    cols[0].metric("Input p50 / p99", f"{p.input_tokens.p50:,.0f} / {p.input_tokens.p99:,.0f}")
    cols[1].metric("Output p50 / p99",
                   f"{p.output_tokens.p50:,.0f} / {p.output_tokens.p99:,.0f}")
    cols[2].metric("Peak/mean (60 s)", _fmt(p.peak_to_mean_60s))
    cols[3].metric("Multi-turn share", _fmt(p.multi_turn_share, "{:.1%}"))
    cols[4].metric("Prefix reuse", _fmt(p.prefix_reuse_infinite, "{:.1%}"))


def _rate_chart(p: Profile) -> None:
    series = p.rate_series
    if series is None:
        st.info("This trace has no timestamps, so there is no arrival-rate chart.")
        return
    fig = go.Figure(go.Bar(x=series.t_s, y=series.requests, name="requests"))
    fig.update_layout(title=f"Requests per {series.window_s:g} s window",
                      xaxis_title="time since first request (s)", yaxis_title="requests",
                      height=320, margin={"t": 40, "b": 40})
    st.plotly_chart(fig, width="stretch")


def _tables(p: Profile) -> None:
    left, right = st.columns(2)
    left.subheader("Token lengths")
    left.dataframe({"": ["input", "output"],
                    **{k: [getattr(p.input_tokens, k), getattr(p.output_tokens, k)]
                       for k in ("p50", "p90", "p99", "mean", "min", "max")}},
                   hide_index=True)
    right.subheader("Segments")
    right.dataframe({"share": [f"{s.share:.1%}" for s in p.segments],
                     "input p50": [s.input_tokens_p50 for s in p.segments],
                     "output p50": [s.output_tokens_p50 for s in p.segments]},
                    hide_index=True)


def render() -> None:
    st.title("Load profile")
    upload = st.file_uploader("Trace (CSV/TSV, JSON, JSONL, Parquet; gzip/zstd too)")
    if upload is None:
        st.caption(f"Showing the bundled sample: {SAMPLE_TRACE.name} (Azure LLM trace 2023, "
                   "CC-BY 4.0). Upload a trace to profile your own.")
        data, name = SAMPLE_TRACE.read_bytes(), SAMPLE_TRACE.name
    else:
        data, name = upload.getvalue(), upload.name
    try:
        with st.spinner("Profiling…"):
            profile = profile_file(data, name)
    except ServeFitError as exc:
        st.error(str(exc))
        return
    st.caption(f"Detected: {profile.format.explanation}. Time: {profile.format.timestamp_rule}.")
    for warning in profile.warnings:
        st.warning(warning)
    _headline(profile)
    _rate_chart(profile)
    _tables(profile)


render()
