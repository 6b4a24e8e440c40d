"""Runs view: what the app kept (profiled traces, recommendations, benchmark runs) and the
comparison tables of runs; all of it read back from the app's store, so it survives restarts.
A session sees its own entries only, unless the deployment shares the history
($SERVEFIT_SHARED_HISTORY, app.session.shared_history)."""

from __future__ import annotations

import json

import streamlit as st

from app.cached import store_cursor, store_workspace
from app.render.figures import latency_rows
from app.render.formats import plain
from app.session import (
    TRACE_KEY,
    keep_recommendation,
    shared_history,
    visible_profiles,
    visible_recommendations,
    visible_runs,
)
from app.storage import SAMPLE_TRACE, TraceChoice
from core.errors import ServeFitError
from profiler import history as profiles
from profiler.ingestion.options import IngestOptions
from recommender.decision import history as recommendations


def _profiles() -> None:
    st.subheader("Profiled traces")
    entries = visible_profiles(profiles.list_profiles(store_cursor()))
    if not entries:
        st.info("No trace profiled yet.")
        return
    st.dataframe({"trace": [e.trace_name for e in entries],
                  "requests": [e.n_requests for e in entries],
                  "profiled at (UTC)": [e.created_at.strftime("%Y-%m-%d %H:%M") for e in entries],
                  "content": [e.trace_digest for e in entries]}, hide_index=True)
    labels = {f"{e.trace_name} ({e.trace_digest[:8]})": e for e in entries}
    picked = st.selectbox("Trace", list(labels), key="runs.trace")
    if st.button("Work on this trace"):
        e = labels[picked]
        st.session_state[TRACE_KEY] = _choice(e)
        st.success(f"Now working on {plain(e.trace_name)}.")


def _recommendations() -> None:
    from recommender.decision.recommendation import read_recommendation

    st.subheader("Recommendations")
    entries = visible_recommendations(recommendations.list_recommendations(store_cursor()))
    if not entries:
        st.info("No recommendation yet.")
        return
    st.dataframe({"recommendation": [e.title for e in entries],
                  "trace": [e.trace_name for e in entries],
                  "at (UTC)": [e.created_at.strftime("%Y-%m-%d %H:%M") for e in entries]},
                 hide_index=True)
    labels = {f"{e.title} — {e.trace_name} ({e.rec_id[:6]})": e for e in entries}
    picked = st.selectbox("Recommendation", list(labels), key="runs.rec")
    if st.button("Open it in Recommend"):
        entry = labels[picked]
        stored = recommendations.load_recommendation(store_cursor(), entry.rec_id)
        if stored is None:
            return
        # The views show a recommendation with the trace it was made on: that trace becomes
        # the current one when this session can still read it.
        trace = _trace_of(entry.trace_digest)
        if trace is None:
            st.error(f"Its trace, {plain(entry.trace_name)}, is no longer among this session's "
                     "profiled traces: upload it again to see this recommendation.")
            return
        try:
            rec = read_recommendation(json.loads(stored[1]))
        except ServeFitError as exc:  # one saved in an older shape
            st.error(str(exc))
            return
        st.session_state[TRACE_KEY] = trace
        keep_recommendation(trace.digest, rec)
        st.success(f"Now working on {plain(trace.name)} with this recommendation.")
        st.page_link("views/recommend.py", label="Go to Recommend")


def _trace_of(digest: str) -> TraceChoice | None:
    """The newest profiled trace of this content the session may see, else None."""
    for e in visible_profiles(profiles.list_profiles(store_cursor())):
        if e.trace_digest == digest:
            return _choice(e)
    return None


def _choice(e) -> TraceChoice:
    return TraceChoice(name=e.trace_name, digest=e.trace_digest, path=e.trace_path,
                       options=IngestOptions.model_validate_json(e.options_json),
                       sample=e.trace_path == str(SAMPLE_TRACE))


def _runs() -> None:
    from runners.benchmark.comparison import compare_runs
    from runners.benchmark.stored_runs import list_runs

    st.subheader("Benchmark runs")
    runs = visible_runs(list_runs(store_workspace()))
    if not runs:
        st.info("No benchmark run yet (see Validate).")
        return
    st.dataframe({"run": [r.run_id for r in runs], "kind": [r.kind for r in runs],
                  "status": [r.status for r in runs],
                  "started (UTC)": [r.started_at.strftime("%Y-%m-%d %H:%M:%S") for r in runs],
                  "requests": [r.n_requests for r in runs],
                  "error": [r.error or "" for r in runs]}, hide_index=True)
    chosen = st.multiselect("Compare runs", [r.run_id for r in runs],
                            default=[r.run_id for r in runs[:3]], key="runs.compare")
    if not chosen:
        return
    comparison = compare_runs(store_workspace(), chosen)
    st.markdown("**Steady throughput**")
    st.dataframe([r.model_dump(mode="json") for r in comparison.throughput], hide_index=True)
    st.markdown("**Latency distribution (ms)**")
    st.dataframe(latency_rows({f"{r.run_id} {r.metric.upper()}": r.latency
                               for r in comparison.latency}), hide_index=True)
    for title, rows, missing in (
            ("Burst spike and recovery", comparison.burst, "No burst run among these."),
            ("Long-run stability", comparison.stability, "No soak run among these.")):
        st.markdown(f"**{title}**")
        if rows:
            st.dataframe([r.model_dump(mode="json") for r in rows], hide_index=True)
        else:
            st.caption(missing)


def render() -> None:
    st.title("Runs and history")
    try:
        st.caption("The history of every session of this app (SERVEFIT_SHARED_HISTORY is on)."
                   if shared_history() else
                   "What this browser session profiled, recommended and ran; other sessions' "
                   "entries stay private (SERVEFIT_SHARED_HISTORY=1 shares them).")
        _profiles()
        _recommendations()
        _runs()
    except ServeFitError as exc:
        st.error(plain(str(exc)))


render()
