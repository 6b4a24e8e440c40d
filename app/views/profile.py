"""Profile view: the chosen trace's headline figures and its load charts."""

from __future__ import annotations

import streamlit as st

from app import charts
from app.cached import charts_for, profile_for
from app.render.formats import fmt_value, plain, web_words
from app.render.profile import lru_tile, model_rows, ngram_detail
from app.session import current_trace
from core.errors import ServeFitError
from profiler.analysis.chart_data.profile_view import ChartData
from profiler.analysis.chart_data.segment_outlines import segment_outlines
from profiler.schema import Profile

TILES_PER_ROW = 4  # five cut values and labels short at common window widths


def _headline(p: Profile) -> None:
    """Metric tiles: short labels, one figure each, the detail in the tile's help."""
    tiles: list[tuple[str, str, str]] = [
        ("Requests", f"{p.n_requests:,}", "Requests in the trace."),
        ("Duration", fmt_value(p.duration_s, "{:,.0f} s"),
         "First to last arrival, seconds."),
        ("Mean QPS", fmt_value(p.mean_qps), "Requests per second over the whole trace."),
        ("Peak QPS (1 s)", fmt_value(p.peak_qps_1s, "{:,.0f}"),
         "Most arrivals in any 1 s window."),
        ("Peak QPS (60 s)", fmt_value(p.peak_qps_60s),
         "Most arrivals in any 60 s window, per second."),
        ("Burstiness (CV)", fmt_value(p.interarrival_cv),
         "Coefficient of variation of the inter-arrival gaps: 1 is Poisson, above 1 burstier."),
        ("Peak/mean (1 s)", fmt_value(p.peak_to_mean_1s, "{:,.1f}"),
         "Peak 1 s arrivals over the mean rate."),
        ("Multi-turn share", fmt_value(p.multi_turn_share, "{:.1%}"),
         "Requests in sessions of more than one turn."),
        ("Input p50", f"{p.input_tokens.p50:,.0f}", "Median prompt length, tokens."),
        ("Input p99", f"{p.input_tokens.p99:,.0f}", "99th-percentile prompt length, tokens."),
        ("Output p50", f"{p.output_tokens.p50:,.0f}", "Median output length, tokens."),
        ("Output p99", f"{p.output_tokens.p99:,.0f}", "99th-percentile output length, tokens."),
        ("Prefix reuse", fmt_value(p.prefix_reuse_infinite, "{:.1%}"),
         "Share of prompt blocks already seen earlier in the trace: the hit ratio of an "
         "unbounded prefix cache."),
    ]
    tiles += [lru_tile(int(blocks), ratio, p.format.block_size)
              for blocks, ratio in (p.prefix_reuse_lru or {}).items()]
    ngram = p.format.ngram_acceptance
    if ngram is not None:
        tiles.append(("Ngram acceptance", f"{ngram.acceptance:.2f}", ngram_detail(ngram)))
    for row in range(0, len(tiles), TILES_PER_ROW):
        cols = st.columns(TILES_PER_ROW)
        for col, (label, value, detail) in zip(cols, tiles[row:row + TILES_PER_ROW],
                                               strict=False):
            col.metric(label, value, help=detail)


def _arrival_tab(c: ChartData) -> None:
    if c.arrivals_1s is None:
        st.info("This trace has no timestamps, so there are no arrival charts (set a Poisson "
                "rate under Start → Reading options to synthesize arrivals).")
        return
    st.plotly_chart(charts.arrivals(c.arrivals_1s), width="stretch")
    if c.arrivals_60s is not None:
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


def _models_tab(c: ChartData) -> None:
    if c.models is None:
        st.info("The trace names one model or none, so there is no per-model split.")
        return
    st.dataframe(model_rows(c.models), hide_index=True)


def _segments_tab(p: Profile) -> None:
    st.caption("Clusters of requests in (log input, log output) space; when they differ enough, "
               "the recommender proposes routing them to separate deployments.")
    st.dataframe({"segment": [i + 1 for i in range(len(p.segments))],
                  "share": [f"{s.share:.1%}" for s in p.segments],
                  "requests": [s.n_requests for s in p.segments],
                  "input p50 (tokens)": [f"{s.input_tokens_p50:,.0f}" for s in p.segments],
                  "output p50 (tokens)": [f"{s.output_tokens_p50:,.0f}" for s in p.segments]},
                 hide_index=True)
    st.dataframe({"tokens": ["input", "output"],
                  **{k: [f"{getattr(p.input_tokens, k):,.{1 if k == 'mean' else 0}f}",
                         f"{getattr(p.output_tokens, k):,.{1 if k == 'mean' else 0}f}"]
                     for k in ("p50", "p90", "p99", "mean", "min", "max")}},
                 hide_index=True)


def render() -> None:
    choice = current_trace()
    st.title("Load profile")
    try:
        with st.spinner(f"Profiling {plain(choice.name)}…"):
            profile = profile_for(choice)
            chart_records = charts_for(choice)
    except ServeFitError as exc:
        st.error(plain(web_words(str(exc))))
        return
    st.caption(plain(f"{choice.name}: {profile.format.explanation}. "
                     f"Time: {profile.format.timestamp_rule}."))
    for warning in profile.warnings:
        st.warning(plain(web_words(warning)))
    _headline(profile)
    arrivals, lengths, reuse, segments, models = st.tabs(
        ["Arrivals", "Lengths", "Prefix reuse", "Segments", "Models"])
    with arrivals:
        _arrival_tab(chart_records)
    with lengths:
        _length_tab(chart_records, profile)
    with reuse:
        _reuse_tab(chart_records)
    with segments:
        _segments_tab(profile)
    with models:
        _models_tab(chart_records)


render()
