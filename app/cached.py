"""Cached library calls for the views, keyed on real inputs: a trace's content hash plus its
ingest options. Each (content, options) pair gets its own DuckDB workspace file, written once
by the profiler and read-only afterwards, so browser sessions never write the same trace
file. The app-wide store (profile history, recommendations, runs) is one DuckDB file behind
one `st.cache_resource` connection; every query takes its own cursor, as DuckDB requires
across threads.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import streamlit as st

from app.redact import user_paths
from app.session import owned
from app.storage import TraceChoice, app_home
from profiler.analysis.chart_data.profile_view import ChartData
from profiler.ingestion.options import IngestOptions
from profiler.schema import Profile
from profiler.workspace import Workspace


def workspace_for(choice: TraceChoice) -> Workspace:
    return Workspace.resolve(app_home() / "workspaces" / f"{choice.key()}.duckdb")


_WORKSPACE_LOCKS: dict[str, threading.Lock] = {}
_WORKSPACE_LOCKS_GUARD = threading.Lock()


def _workspace_lock(key: str) -> threading.Lock:
    with _WORKSPACE_LOCKS_GUARD:
        return _WORKSPACE_LOCKS.setdefault(key, threading.Lock())


@st.cache_data(show_spinner=False, max_entries=32)
def _profile(key: str, choice_json: str) -> Profile:
    from profiler import history
    from profiler.analysis.profile import profile_trace

    choice = TraceChoice.model_validate_json(choice_json)
    # Sessions uploading the same content share its workspace; one ingests, the other then
    # finds it ingested (two ingests at once conflict inside DuckDB).
    with _workspace_lock(key):
        profile = profile_trace(choice.path, workspace=workspace_for(choice),
                                options=choice.options, seed=choice.options.seed)
    history.save_profile(
        store_cursor(), trace_digest=choice.digest, options_json=choice.options.model_dump_json(),
        trace_name=choice.name, trace_path=choice.path, n_requests=profile.n_requests,
        profile_json=profile.model_dump_json())
    return profile


def profile_for(choice: TraceChoice) -> Profile:
    """The choice's Profile (ingested once per content and options, then cached).

    Raises:
        ServeFitError: the trace cannot be read (the message names the uploaded file); nothing
            is cached or stored.
    """
    with user_paths(choice):
        profile = _profile(choice.key(), choice.model_dump_json())
    owned().profiles.add((choice.digest, choice.options.model_dump_json()))
    return profile


@st.cache_data(show_spinner=False, max_entries=32)
def _charts(key: str, choice_json: str) -> ChartData:
    from profiler.analysis.chart_data.profile_view import chart_data

    return chart_data(workspace_for(TraceChoice.model_validate_json(choice_json)))


def trace_path_for(choice: TraceChoice) -> str:
    """A path any stage can read with default options: the file itself when it needs none,
    else the canonical Parquet copy of its workspace (written once, after `profile_for`)."""
    if choice.options == IngestOptions():
        return choice.path
    target = app_home() / "canonical" / f"{choice.key()}.parquet"
    if not target.exists():
        from profiler.ingestion.canonical import write_canonical

        with user_paths(choice):
            write_canonical(workspace_for(choice), target)
    return str(target)


def charts_for(choice: TraceChoice) -> ChartData:
    """The chart records of a profiled choice (call `profile_for` first)."""
    with user_paths(choice):
        return _charts(choice.key(), choice.model_dump_json())


@st.cache_data(show_spinner=False)
def columns_of(path: str, digest: str) -> list[str]:
    """Column names of a stored trace, for the mapping form."""
    from profiler.ingestion.columns import trace_columns

    return trace_columns(path)


@st.cache_resource
def _store_connection(path: str) -> Any:
    import duckdb

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(path)
    con.execute("SET TimeZone = 'UTC'")
    return con


def store_cursor() -> Any:
    """A cursor of the app-wide store (history, recommendations, runs).

    One connection per process and store file, shared by every session; each query (or short
    sequence of queries) takes its own cursor, as DuckDB requires across threads.
    """
    return _store_connection(str(store_workspace().path)).cursor()


def store_workspace() -> Workspace:
    """The store as a Workspace, for libraries that take one (the runs store)."""
    return Workspace.resolve(app_home() / "store.duckdb")


@st.cache_data(show_spinner=False)
def catalog_names() -> tuple[list[str], list[str]]:
    """(GPU names, model names) of the bundled catalog."""
    from recommender.catalog.lookup import load_gpus, load_models

    return sorted(load_gpus()), sorted(load_models())


def save_recommendation(choice: TraceChoice, rec: Any) -> str:
    """Store a Recommendation in the app's history; returns its id."""
    from recommender.decision import history

    title = f"{rec.pick.label} on {rec.gpus}× {rec.gpu}, {rec.model}"
    rec_id = history.save_recommendation(
        store_cursor(), trace_digest=choice.digest, trace_name=choice.name, title=title,
        request_json=rec.request.model_dump_json(), body_json=rec.model_dump_json())
    owned().recommendations.add(rec_id)
    return rec_id


@st.cache_data(show_spinner=False, max_entries=16)
def memory_plan_of(config_json: str, gpu: str, model: str) -> Any:
    """The per-GPU memory plan (recommender.model.memory.MemoryPlan) of a pick's config."""
    from engines.config import EngineConfig
    from recommender.catalog.lookup import get_gpu, get_model
    from recommender.model.memory import plan_memory

    return plan_memory(EngineConfig.model_validate_json(config_json), get_gpu(gpu),
                       get_model(model))


@st.cache_data(ttl=30, show_spinner=False, max_entries=16)
def local_engine_missing(config_json: str, venv: str | None) -> str | None:
    """Why the pick's engine cannot start as a local process here, or None
    (`runners.server.server_command.local_prerequisite`; kept 30 s, it may start a Python)."""
    from engines.config import EngineConfig
    from runners.server.server_command import local_prerequisite

    config = EngineConfig.model_validate_json(config_json)
    return local_prerequisite(config, Path(venv) if venv else None)
