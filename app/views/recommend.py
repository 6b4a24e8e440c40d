"""Recommend view: GPU, model and SLOs in; the pick, why, how far it holds, the alternatives
and config files out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from app import charts
from app.cached import (
    catalog_names,
    memory_plan_of,
    profile_for,
    save_recommendation,
    trace_path_for,
    workspace_for,
)
from app.redact import user_paths
from app.render.figures import band_text, cell_words, curve_bands, interval_text, latency_rows
from app.render.formats import fmt_ms, plain, web_words
from app.render.recommendation import (
    CANDIDATE_HELP,
    LIMIT_HELP,
    candidate_points,
    candidate_rows,
    decision_line,
    label_legend,
    memory_text,
    price_text,
)
from app.session import current_recommendation, current_trace, keep_recommendation
from app.storage import bundle_zip, store_model_config
from core.errors import ServeFitError
from recommender.decision.recommendation import OBJECTIVES, UNSERVABLE

if TYPE_CHECKING:
    from engines.export.request import ExportRequest

DEFAULT_GPU = "H100-SXM"
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
OWN_MODEL = "my own config.json…"


def _index(options: list[str], value: str, fallback: str) -> int:
    for name in (value, fallback):
        if name in options:
            return options.index(name)
    return 0


def _form(shown):
    """The request form, filled with the shown recommendation's request (so the inputs say
    what the pick on screen was asked for, also after a visit to another view); returns a
    RecommendRequest when submitted, else None."""
    from recommender.decision.recommendation import RecommendRequest

    gpus, models = catalog_names()
    choice = current_trace()
    was = shown.request if shown is not None else RecommendRequest(
        source=choice.path, gpu=DEFAULT_GPU, model=DEFAULT_MODEL)
    with st.form("recommend"):
        left, mid, right = st.columns(3)
        gpu = left.selectbox("GPU", gpus, index=_index(gpus, was.gpu, DEFAULT_GPU),
                             key="rec.gpu")
        count = left.number_input("GPUs", min_value=1, max_value=1024, value=was.gpus,
                                  key="rec.gpus")
        model_names = [*models, OWN_MODEL]
        model = mid.selectbox("Model", model_names,
                              index=_index(model_names, was.model, DEFAULT_MODEL),
                              key="rec.model")
        config_json = mid.file_uploader("or its config.json (with the option above)",
                                        type=["json"])
        ttft = right.number_input("SLO: p95 TTFT (ms), 0 = none", min_value=0.0,
                                  value=(was.slo_ttft_p95_s or 0.0) * 1e3,
                                  key="rec.slo_ttft_ms")
        tpot = right.number_input("SLO: p95 TPOT (ms), 0 = none", min_value=0.0,
                                  value=(was.slo_tpot_p95_s or 0.0) * 1e3,
                                  key="rec.slo_tpot_ms")
        objective = st.radio("Objective", list(OBJECTIVES), format_func=OBJECTIVES.__getitem__,
                             index=list(OBJECTIVES).index(was.objective), horizontal=True)
        with st.expander("Search settings"):
            max_requests = st.number_input("Requests simulated (a window of the trace)",
                                           min_value=100, value=was.max_requests, step=1_000,
                                           key="rec.max_requests")
            rate = st.number_input("Arrival rate for a trace without timestamps (req/s), "
                                   "0 = the trace's own", min_value=0.0,
                                   value=was.arrival_rate_rps or 0.0, key="rec.arrival_rate")
            seed = st.number_input("Seed", min_value=0, value=was.seed)
            price = st.number_input("USD per GPU-hour for $/Mtok, 0 = the catalog's list "
                                    "price", min_value=0.0,
                                    value=was.gpu_price_per_hour_usd or 0.0, key="rec.gpu_price")
        if not st.form_submit_button("Recommend", type="primary"):
            return None
    if model == OWN_MODEL:
        if config_json is None:
            st.error("Upload the model's config.json, or pick a catalog model.")
            return None
        model = store_model_config(config_json.getvalue())
    return RecommendRequest(
        source=trace_path_for(choice), gpu=gpu, gpus=int(count), model=model,
        slo_ttft_p95_s=ttft / 1e3 or None, slo_tpot_p95_s=tpot / 1e3 or None,
        objective=objective, max_requests=int(max_requests), seed=int(seed),
        arrival_rate_rps=rate or None,
        gpu_price_per_hour_usd=price or None)


def _run(request) -> None:
    from recommender.decision.recommend import recommend_trace

    choice = current_trace()
    bar = st.progress(0.0, text="Starting…")
    try:
        def progress(fraction: float, what: str) -> None:
            bar.progress(min(1.0, fraction), text=what)

        with user_paths(choice):
            # the trace as the Profile view ingested it: its profile and workspace, not read
            # again (`recommend_trace` reads the file only for a rate the trace lacks)
            rec = recommend_trace(request, profile=profile_for(choice),
                                  workspace=workspace_for(choice), progress=progress)
    except ServeFitError as exc:
        bar.empty()
        st.error(plain(web_words(str(exc))))
        return
    bar.empty()
    save_recommendation(choice, rec)
    keep_recommendation(choice.digest, rec)


def _memory(rec, profile) -> None:
    try:
        plan = memory_plan_of(rec.pick.config.model_dump_json(), rec.gpu, rec.request.model)
    except ServeFitError as exc:
        st.caption(plain(f"No memory split: {exc}"))
        return
    st.plotly_chart(charts.memory_split(plan), width="stretch")
    st.caption(plain(memory_text(plan, profile)))


def _pick(rec, profile) -> None:
    p = rec.pick.predicted
    for warning in rec.warnings:
        if warning.code == UNSERVABLE:  # said first: the pick cannot serve the load as it is
            st.error(f"**Not deployable as it is.** {plain(warning.text)}")
    st.subheader(f"Pick: {rec.pick.config.engine} — {rec.pick.label}")
    st.caption(f"{rec.model} on {rec.gpus}× {rec.gpu}. {rec.window}. "
               f"Search: {rec.candidates_simulated:,} simulations in {rec.search_time_s:,.1f} s.")
    if rec.decision is not None:
        st.markdown(f"**Decision** {plain(decision_line(rec.decision))}")
    # Two rows of three: six tiles a row cut values short at 1024 px ("38…", "12.…").
    cols = [*st.columns(3), *st.columns(3)]
    cols[0].metric("TTFT p95", fmt_ms(p.ttft_s.p95))
    cols[1].metric("TPOT p95", fmt_ms(p.tpot_s.p95, "{:,.1f} ms"))
    cols[2].metric("Output tok/s", f"{p.output_throughput_tok_s:,.0f}")
    cols[3].metric("Requests/s", f"{p.request_throughput_rps:,.2f}")
    cols[4].metric("Goodput req/s", "n/a" if p.goodput_rps is None else f"{p.goodput_rps:,.2f}")
    cols[5].metric("KV headroom", f"{p.kv_headroom_fraction:.0%}")
    st.markdown(f"**Error band** {band_text(p.band, p.calibration_cell)}: the median error "
                "of this calibration cell on measurements left out of the fit")
    if words := cell_words(p.calibration_cell):
        st.caption(f"Calibration cell: {plain(words)}.")
    if p.intervals:
        st.text("Interval (p10-p90 on publisher families the fit never saw): "
                + interval_text(p))
    st.markdown(f"**Price** {plain(price_text(rec.gpu_price, rec.pick.usd_per_mtok))}")
    if not p.slo_met:
        st.warning("The pick does not meet the SLOs: it is the closest candidate.")
    st.dataframe(latency_rows({"TTFT": p.ttft_s, "TPOT": p.tpot_s, "ITL": p.itl_s,
                               "E2E": p.e2e_s}), hide_index=True)
    bands = curve_bands(p)
    st.plotly_chart(charts.latency_quantiles([("TTFT", p.ttft_s, bands.get("ttft_p95_s")),
                                              ("TPOT", p.tpot_s, bands.get("tpot_p95_s"))]),
                    width="stretch")
    _memory(rec, profile)
    st.markdown("**Why**")
    st.markdown("\n".join(f"- {r.text}" + (f" (`{r.figure}` = {r.value:,.4g})"
                                            if r.value is not None else "")
                          for r in rec.reasons))
    for warning in rec.warnings:
        st.warning(plain(web_words(warning.text)))


def _candidates_table(candidates) -> None:
    st.dataframe(candidate_rows(candidates), hide_index=True, column_config={
        name: st.column_config.Column(help=text) for name, text in CANDIDATE_HELP.items()})


def _others(rec) -> None:
    st.markdown("**Best configuration of each engine**")
    _candidates_table(rec.alternatives)
    with st.expander("What the configuration labels mean"):
        st.markdown("\n".join(f"- {plain(line)}" for line in
                               label_legend([c.label for c in rec.candidates])))
    st.plotly_chart(charts.latency_throughput(
        candidate_points(rec.candidates, rec.pick.label),
        "p95 TTFT + p95 TPOT × (mean output − 1) (ms, log)", "goodput per GPU (req/s)"),
        width="stretch")
    with st.expander(f"All {len(rec.candidates)} candidates"):
        _candidates_table(rec.candidates)
    if rec.routing is not None:
        st.markdown(f"**Routing plan** — {rec.routing.gain_text}")
        st.dataframe({"route": [d.criteria for d in rec.routing.deployments],
                      "share": [f"{d.share:.0%}" for d in rec.routing.deployments],
                      "GPUs": [d.gpus for d in rec.routing.deployments],
                      "engine": [d.config.engine for d in rec.routing.deployments]},
                     hide_index=True)


def _capacity(rec) -> None:
    from core.capacity_text import LIMIT_TEXT, boundary_text, day_text, growth_table

    cap = rec.capacity
    if cap is None:
        return
    st.markdown("**How far the pick holds**")
    b = cap.pick
    cols = st.columns(3)
    cols[0].metric("SLO boundary", f"{'≥ ' if b.capped else ''}{b.rate_rps:,.3g} req/s")
    cols[1].metric("× trace mean", f"{b.multiple_of_mean:,.2g}×")
    cols[2].metric("× trace peak", "n/a" if b.multiple_of_peak is None
                   else f"{b.multiple_of_peak:,.2g}×")
    # A sentence, not a tile: a tile cut "prefill interference" to "prefill interfe…"
    st.markdown(f"**Binds first:** {LIMIT_TEXT[b.binding]}: {LIMIT_HELP[b.binding]}")
    st.caption(f"{boundary_text(b)}. Today: {cap.today_rps:,.3g} req/s. Found with "
               f"{cap.method}.")
    st.dataframe({"engine's best": [x.label for x in [b, *cap.alternatives]],
                  "boundary": [boundary_text(x) for x in [b, *cap.alternatives]]},
                 hide_index=True)
    st.markdown("**At 2× / 5× / 10× today's traffic**")
    rows = growth_table(cap)
    st.dataframe({k: [r[k] for r in rows] for k in (rows[0] if rows else {})}, hide_index=True)
    st.plotly_chart(charts.load_curve(cap.curve, curve_bands(rec.pick.predicted),
                                      cap.alternative_curves), width="stretch")
    if cap.day is not None:
        st.markdown(f"**Over the trace's span** {plain(day_text(cap.day))}")
        st.caption(f"Sized from {cap.day.method}.")
        st.plotly_chart(charts.day_plan(cap.day), width="stretch")


def _export_request(rec, candidate) -> ExportRequest:
    """The ExportRequest of the pick or of another engine's best (built from the candidate)."""
    from recommender.decision.export_view import alternative_export

    return alternative_export(rec, candidate)


def _downloads(rec) -> None:
    from engines.errors import EngineError
    from engines.export.bundle import render_bundle

    st.markdown("**Config files**")
    others = [c for c in rec.alternatives if c.label != rec.pick.label]
    choices = {f"{c.config.engine}: {c.label}" + (" (the pick)" if c is rec.pick else ""): c
               for c in [rec.pick, *others]}
    chosen = choices[st.selectbox("Configuration to export", list(choices), key="rec.export")]
    try:
        files = render_bundle(_export_request(rec, chosen))
    except (EngineError, ServeFitError) as exc:
        st.error(f"cannot export this configuration: {exc}")
        return
    folder = f"servefit-{chosen.config.engine}"
    st.download_button("All files (zip)", bundle_zip(files, folder), f"{folder}.zip",
                       mime="application/zip", type="primary", icon=":material/download:")
    cols = st.columns(4)
    for i, (name, text) in enumerate(files.items()):
        cols[i % 4].download_button(name, text, name, mime="text/plain", key=f"dl.{name}")


def render() -> None:
    st.title("Recommendation")
    choice = current_trace()
    try:
        with st.spinner(f"Profiling {plain(choice.name)}…"):
            profile = profile_for(choice)
    except ServeFitError as exc:
        st.error(plain(str(exc)))
        return
    st.caption(f"Trace: {plain(choice.name)}, {profile.n_requests:,} requests")
    try:
        request = _form(current_recommendation())
    except ServeFitError as exc:
        st.error(str(exc))
        request = None
    if request is not None:
        _run(request)
    rec = current_recommendation()
    if rec is None:
        st.info("Pick the GPU, model and SLOs, then press Recommend.")
        return
    _pick(rec, profile)
    _capacity(rec)
    _others(rec)
    _downloads(rec)


render()
