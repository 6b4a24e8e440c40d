"""Profile view: the chosen trace's headline figures and its load charts."""

from __future__ import annotations

import streamlit as st

from app import charts
from app.render import fmt_value
from app.resources import charts_for, current_trace, profile_for
from core.errors import ServeFitError
from profiler.chart_data import ChartData, segment_outlines
from profiler.schema import Profile


def _headline(p: Profile) -> None:
    cols = st.columns(5)
    cols[0].metric("Requests", f"{p.n_requests:,}")
    cols[1].metric("Duration", fmt_value(p.duration_s, "{:,.0f} s"))
    cols[2].metric("Mean QPS", fmt_value(p.mean_qps))
    cols[3].metric("Peak QPS (1 s)", fmt_value(p.peak_qps_1s, "{:,.0f}"))
    cols[4].metric("Peak QPS (60 s)", fmt_value(p.peak_qps_60s))
    cols = st.columns(5)
    cols[0].metric("Burstiness (inter-arrival CV)", fmt_value(p.interarrival_cv))
    cols[1].metric("Peak/mean (1 s)", fmt_value(p.peak_to_mean_1s, "{:,.1f}"))
    cols[2].metric("Input p50 / p99", f"{p.input_tokens.p50:,.0f} / {p.input_tokens.p99:,.0f}")
    cols[3].metric("Output p50 / p99",
                   f"{p.output_tokens.p50:,.0f} / {p.output_tokens.p99:,.0f}")
    cols[4].metric("Multi-turn share", fmt_value(p.multi_turn_share, "{:.1%}"))
    cols = st.columns(5)
    cols[0].metric("Prefix reuse (unbounded cache)", fmt_value(p.prefix_reuse_infinite, "{:.1%}"))
    for col, (blocks, ratio) in zip(cols[1:], (p.prefix_reuse_lru or {}).items(), strict=False):
        col.metric(f"Prefix reuse (LRU {int(blocks):,} blocks)", f"{ratio:.1%}")


def _arrival_tab(c: ChartData) -> None:
    if c.arrivals_1s is None:
        st.info("This trace has no timestamps, so there are no arrival charts (set a Poisson "
                "rate under Start → Reading options to synthesize arrivals).")
        return
    st.plotly_chart(charts.arrivals(c.arrivals_1s), width="stretch")
    st.plotly_chart(charts.arrivals(c.arrivals_60s), width="stretch")
    if c.interarrival_s is not None:
        st.plotly_chart(charts.log_histogram(c.interarrival_s, "Inter-arrival gaps", "seconds"),
                        width="stretch")


def _length_tab(c: ChartData, p: Profile) -> None:
    left, right = st.columns(2)
    left.plotly_chart(charts.log_histogram(c.input_tokens, "Input tokens", "tokens"),
                      width="stretch")
    right.plotly_chart(charts.log_histogram(c.output_tokens, "Output tokens", "tokens"),
                       width="stretch")
    st.plotly_chart(charts.length_heatmap(c.lengths_2d, segment_outlines(p.segments)),
                    width="stretch")


def _reuse_tab(c: ChartData) -> None:
    if c.prefix_reuse is None:
        st.info("This trace has no prompt blocks (no text, no hash ids), so prefix reuse "
                "cannot be measured.")
        return
    st.plotly_chart(charts.reuse_curve(c.prefix_reuse), width="stretch")


def _segments_tab(p: Profile) -> None:
    st.caption("Clusters of requests in (log input, log output) space; when they differ enough, "
               "the recommender proposes routing them to separate deployments.")
    st.dataframe({"segment": [i + 1 for i in range(len(p.segments))],
                  "share": [f"{s.share:.1%}" for s in p.segments],
                  "requests": [s.n_requests for s in p.segments],
                  "input p50": [s.input_tokens_p50 for s in p.segments],
                  "output p50": [s.output_tokens_p50 for s in p.segments]},
                 hide_index=True)
    st.dataframe({"": ["input tokens", "output tokens"],
                  **{k: [getattr(p.input_tokens, k), getattr(p.output_tokens, k)]
                     for k in ("p50", "p90", "p99", "mean", "min", "max")}},
                 hide_index=True)


def render() -> None:
    choice = current_trace()
    st.title("Load profile")
    try:
        with st.spinner(f"Profiling {choice.name}…"):
            profile = profile_for(choice)
            chart_records = charts_for(choice)
    except ServeFitError as exc:
        st.error(str(exc))
        return
    st.caption(f"{choice.name}: {profile.format.explanation}. "
               f"Time: {profile.format.timestamp_rule}.")
    for warning in profile.warnings:
        st.warning(warning)
    _headline(profile)
    arrivals, lengths, reuse, segments = st.tabs(
        ["Arrivals", "Lengths", "Prefix reuse", "Segments"])
    with arrivals:
        _arrival_tab(chart_records)
    with lengths:
        _length_tab(chart_records, profile)
    with reuse:
        _reuse_tab(chart_records)
    with segments:
        _segments_tab(profile)


render()
