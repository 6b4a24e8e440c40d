"""Start view: choose the trace (bundled sample or an upload), and how to read it when needed."""

from __future__ import annotations

import streamlit as st

from app.cached import columns_of, profile_for
from app.render.formats import plain, web_words
from app.session import PENDING_KEY, TRACE_KEY, current_trace
from app.storage import SAMPLE_LABEL, TraceChoice, display_name, sample_choice, store_upload
from core.errors import FormatDetectionError, ServeFitError
from profiler.formats.registry import ALL_KINDS
from profiler.ingestion.options import IngestOptions
from profiler.ingestion.timestamps import TIME_UNITS as UNIT_NAMES
from profiler.ingestion.timestamps import parse_unit

# The profiler's registries, in detection order, after the "let the profiler decide" choice.
FORMATS = ["detect", *ALL_KINDS]
TIME_UNITS = ["detect", *UNIT_NAMES]
MAP_FIELDS = {"time": "arrival time", "input": "input (prompt) tokens",
              "output": "output tokens", "session": "session / conversation id",
              "model": "model", "status": "status"}
NONE = "(none)"
UPLOAD_ID_KEY = "start.upload_id"


def _store(upload) -> TraceChoice:
    name = plain(display_name(upload.name))
    bar = st.progress(0.0, text=f"Receiving {name} ({upload.size / 1e6:,.1f} MB)…")
    choice = store_upload(upload, upload.name, upload.size,
                          progress=lambda f: bar.progress(f, text=f"Storing {name}…"))
    bar.empty()
    return choice


def _try_profile(choice: TraceChoice) -> bool:
    """Profile the choice; on success it becomes the session's trace."""
    try:
        with st.spinner(f"Reading and profiling {plain(choice.name)}…"):
            profile = profile_for(choice)
    except FormatDetectionError as exc:
        st.error(plain(web_words(str(exc))))
        st.info("Name the columns below (or pick the format) and read the file again.")
        return False
    except ServeFitError as exc:
        st.error(plain(web_words(str(exc))))
        return False
    st.session_state[TRACE_KEY] = choice
    st.session_state.pop(PENDING_KEY, None)
    st.success(plain(f"{choice.name}: {profile.n_requests:,} requests, "
                     f"{profile.format.explanation}."))
    return True


def _options_form(choice: TraceChoice) -> IngestOptions | None:
    """The reading options; returns new options when the user submits the form."""
    try:
        columns = columns_of(choice.path, choice.digest)
    except ServeFitError:
        columns = []
    with st.form("read_options"):
        st.markdown(f"**How to read** {plain(choice.name)}")
        fmt = st.selectbox("Format", FORMATS, index=FORMATS.index(choice.options.format or
                                                                   "detect"))
        cols = st.columns(3)
        mapping = {}
        for i, (field, label) in enumerate(MAP_FIELDS.items()):
            current = choice.options.column_map.get(field, NONE)
            options = [NONE, *columns] if columns else [NONE]
            mapping[field] = cols[i % 3].selectbox(
                label, options, index=options.index(current) if current in options else 0,
                key=f"map.{field}")
        unit = st.selectbox("Timestamp unit", TIME_UNITS)
        rate = st.number_input("Synthesize Poisson arrivals at (req/s) when the trace has no "
                               "timestamps; 0 = no", min_value=0.0, value=0.0)
        if not st.form_submit_button("Read the file with these options"):
            return None
    return IngestOptions(
        format=None if fmt == "detect" else fmt,
        column_map={k: v for k, v in mapping.items() if v != NONE},
        time_unit=None if unit == "detect" else parse_unit(unit),
        synthesize_arrivals_rps=rate or None,
    )


def render() -> None:
    st.title("ServeFit")
    st.markdown("Profile your LLM traffic, get an engine and configuration for it "
                "(vLLM, SGLang, TensorRT-LLM), export the config files, and validate live.")
    # Filled last: an upload or a button below may change the trace during this run.
    current_line = st.empty()
    if not current_trace().sample and st.button("Use the bundled sample instead"):
        _try_profile(sample_choice())
    upload = st.file_uploader(
        "Upload a trace: CSV/TSV, JSON, JSONL or Parquet, optionally gzip or zstd "
        "(Azure, BurstGPT, Mooncake, OpenAI logs, ShareGPT, or any table)")
    if upload is not None and st.session_state.get(UPLOAD_ID_KEY) != upload.file_id:
        st.session_state[UPLOAD_ID_KEY] = upload.file_id
        stored = _store(upload)
        st.session_state[PENDING_KEY] = stored
        _try_profile(stored)
    pending: TraceChoice | None = st.session_state.get(PENDING_KEY)
    target = pending or current_trace()
    with st.expander("Reading options (column names, format, time unit)", expanded=bool(pending)):
        options = _options_form(target)
    if options is not None:
        _try_profile(target.model_copy(update={"options": options}))
    if pending is None:
        st.page_link("views/profile.py", label="See the load profile", icon=":material/monitoring:")
    current = current_trace()
    current_line.info(f"Current trace: {plain(current.name)}"
                      + (f" — the bundled sample, {SAMPLE_LABEL}" if current.sample else ""))


render()
