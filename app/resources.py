"""Shared state and cached library calls for the Streamlit views.

Caches are keyed on real inputs: a trace's content hash plus its ingest options. Each
(content, options) pair gets its own DuckDB workspace file, written once by the profiler and
read-only afterwards, so browser sessions never write the same trace file. The app-wide store
(profile history, recommendations, runs) is one DuckDB file behind one `st.cache_resource`
connection; every query takes its own cursor, as DuckDB requires across threads.
Everything lives under `$SERVEFIT_APP_HOME` (default `.servefit/app` in the working directory),
so it survives a restart. Uploads are stored under generated names (the browser's name is only
shown), errors name the user's file rather than server paths, and a session lists only its own
history unless `$SERVEFIT_SHARED_HISTORY` says otherwise (README, "Sessions: who sees what").
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import time
import unicodedata
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

import streamlit as st
from pydantic import Field

from core.atomic import write_atomic
from core.errors import ServeFitError, UsageError
from core.records import Record
from profiler.chart_data import ChartData
from profiler.ingest_options import IngestOptions
from profiler.schema import Profile
from profiler.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
SAMPLE_LABEL = "Azure LLM inference trace 2023, conversation (CC-BY 4.0)"
HOME_ENV_VAR = "SERVEFIT_APP_HOME"
DEFAULT_HOME = Path(".servefit") / "app"
COPY_CHUNK_BYTES = 8 << 20
UPLOAD_FILE_NAME = "trace"  # every upload's stored name; the browser's is for display only
DISPLAY_NAME_CHARS = 120
STALE_INCOMING_S = 3600.0  # an upload's copy takes seconds; older temporaries are orphans
# profiler.sources expands gzip/zstd uploads to <temp>/servefit-expand-*/<name>.plain
_EXPANSION_PATH = re.compile(r"\S*servefit-expand-[^\s/]+/[^\s:,]*")
TRACE_KEY = "servefit.trace"
RECOMMENDATION_KEY = "servefit.recommendation"
RECOMMENDED_FOR_KEY = "servefit.recommendation.trace"  # digest of the trace it was made on
PENDING_KEY = "servefit.start.pending"  # an upload not yet read successfully
OWNED_KEY = "servefit.owned"
SHARED_HISTORY_ENV_VAR = "SERVEFIT_SHARED_HISTORY"


class TraceChoice(Record):
    """The trace the views work on (kept in st.session_state under TRACE_KEY)."""

    name: str = Field(description="file name as uploaded")
    digest: str = Field(description="sha256 of the content, first 16 hex digits")
    path: str = Field(description="where the app keeps the file")
    options: IngestOptions = Field(default_factory=IngestOptions)
    sample: bool = False

    def key(self) -> str:
        """Cache key: content and options (not the name, which changes nothing)."""
        return f"{self.digest}-{options_digest(self.options)}"


def app_home() -> Path:
    return Path(os.environ.get(HOME_ENV_VAR) or DEFAULT_HOME)


def options_digest(options: IngestOptions) -> str:
    return hashlib.sha256(options.model_dump_json().encode()).hexdigest()[:12]


@st.cache_data(show_spinner=False)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(COPY_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def sample_choice() -> TraceChoice:
    """The bundled sample trace, read in place."""
    stat = SAMPLE_TRACE.stat()
    digest = _file_digest(str(SAMPLE_TRACE), stat.st_size, stat.st_mtime_ns)
    return TraceChoice(name=SAMPLE_TRACE.name, digest=digest, path=str(SAMPLE_TRACE),
                       sample=True)


def current_trace() -> TraceChoice:
    """The session's trace; the bundled sample until the user picks another."""
    choice = st.session_state.get(TRACE_KEY)
    if choice is None:
        choice = st.session_state[TRACE_KEY] = sample_choice()
    return choice


def keep_recommendation(trace_digest: str, rec: Any) -> None:
    """Make `rec`, made on the trace of `trace_digest`, the session's recommendation."""
    st.session_state[RECOMMENDATION_KEY] = rec
    st.session_state[RECOMMENDED_FOR_KEY] = trace_digest


def current_recommendation() -> Any:
    """The session's recommendation when it was made on the current trace, else None: after
    another trace is chosen, the views must not show the previous trace's pick under the new
    trace's name."""
    rec = st.session_state.get(RECOMMENDATION_KEY)
    if rec is None or st.session_state.get(RECOMMENDED_FOR_KEY) != current_trace().digest:
        return None
    return rec


def display_name(name: str) -> str:
    """The browser's file name made safe to show: its last path part, without control
    characters, at most DISPLAY_NAME_CHARS characters; "upload" when nothing is left. Only
    ever shown (as escaped text), never used as a path."""
    last = name.replace("\\", "/").rsplit("/", 1)[-1]
    clean = "".join(ch for ch in last if unicodedata.category(ch)[0] != "C").strip()
    if clean in {"", ".", ".."}:
        return "upload"
    return clean if len(clean) <= DISPLAY_NAME_CHARS else clean[:DISPLAY_NAME_CHARS - 1] + "…"


def store_upload(upload: BinaryIO, name: str, size: int,
                 progress: Callable[[float], object] | None = None) -> TraceChoice:
    """Keep an uploaded trace under the app home, as `uploads/<content hash>/trace`.

    The stored name is generated, whatever the browser sent (`..`, a name over 255 bytes,
    Markdown); the original is kept only for display (`display_name`). The upload (a seekable
    buffer: Streamlit holds it in memory) is hashed first, then copied to a private temporary
    file and linked into place whole; when another session stored the same content first,
    theirs is kept (its mtime, part of the ingest cache key, stays put) and ours removed. No
    temporary survives an error. `progress` sees the fraction done, hashing the first half,
    copying the second.
    """
    def step(done: int, half: int) -> None:
        if progress is not None and size:
            progress(min(1.0, (half + done / size) / 2))

    digest = hashlib.sha256()
    done = 0
    while chunk := upload.read(COPY_CHUNK_BYTES):
        digest.update(chunk)
        done += len(chunk)
        step(done, 0)
    short = digest.hexdigest()[:16]
    target = app_home() / "uploads" / short / UPLOAD_FILE_NAME
    if not target.exists():
        upload.seek(0)
        _copy_into_place(upload, target, lambda n: step(n, 1))
    if progress is not None:
        progress(1.0)
    return TraceChoice(name=display_name(name), digest=short, path=str(target))


def _copy_into_place(upload: BinaryIO, target: Path, copied: Callable[[int], None]) -> None:
    """Copy to a temporary sibling, then link it to `target` unless that exists by then.

    Temporaries older than STALE_INCOMING_S (of a process killed mid-copy) are removed first.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    for old in target.parent.glob(".incoming-*"):
        with suppress(OSError):
            if time.time() - old.stat().st_mtime > STALE_INCOMING_S:
                old.unlink()
    tmp = target.with_name(f".incoming-{uuid.uuid4().hex}")
    try:
        done = 0
        with open(tmp, "wb") as out:
            while chunk := upload.read(COPY_CHUNK_BYTES):
                out.write(chunk)
                done += len(chunk)
                copied(done)
        try:
            os.link(tmp, target)
        except FileExistsError:  # the same content, stored by another session: keep theirs
            pass
        except OSError:  # a file system without hard links: rename (replaces, still whole)
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


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
    from profiler.profile import profile_trace

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


@contextmanager
def user_paths(choice: TraceChoice) -> Iterator[None]:
    """Errors raised inside name the user's file, not where the server keeps it: the stored
    path (and its gzip expansion) becomes the uploaded name, the app home "the app's store"."""
    try:
        yield
    except ServeFitError as exc:
        exc.args = (_hide_paths(str(exc), choice),)
        raise


def _hide_paths(text: str, choice: TraceChoice) -> str:
    for path in (os.path.abspath(choice.path), choice.path):
        text = text.replace(path, choice.name)
    return hide_home(_EXPANSION_PATH.sub(lambda _: choice.name, text))


def hide_home(text: str) -> str:
    """`text` with the app home's path (absolute or as configured) said as "the app's store"."""
    home = app_home()
    for path in (str(home.resolve()), str(home.absolute()), str(home)):
        text = text.replace(path, "the app's store")
    return text


def profile_for(choice: TraceChoice) -> Profile:
    """The choice's Profile (ingested once per content and options, then cached).

    Raises:
        ServeFitError: the trace cannot be read (the message names the uploaded file); nothing
            is cached or stored.
    """
    with user_paths(choice):
        profile = _profile(choice.key(), choice.model_dump_json())
    _owned().profiles.add((choice.digest, choice.options.model_dump_json()))
    return profile


@st.cache_data(show_spinner=False, max_entries=32)
def _charts(key: str, choice_json: str) -> ChartData:
    from profiler.chart_data import chart_data

    return chart_data(workspace_for(TraceChoice.model_validate_json(choice_json)))


def trace_path_for(choice: TraceChoice) -> str:
    """A path any stage can read with default options: the file itself when it needs none,
    else the canonical Parquet copy of its workspace (written once, after `profile_for`)."""
    if choice.options == IngestOptions():
        return choice.path
    target = app_home() / "canonical" / f"{choice.key()}.parquet"
    if not target.exists():
        from profiler.canonical import write_canonical

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
    from profiler.columns import trace_columns

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
    from recommender.catalog import load_gpus, load_models

    return sorted(load_gpus()), sorted(load_models())


def bundle_zip(files: dict[str, str], folder: str) -> bytes:
    """The export bundle as a zip (pure packaging: names and texts in, bytes out)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in sorted(files.items()):
            info = zipfile.ZipInfo(f"{folder}/{name}", date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".sh") else 0o644) << 16
            archive.writestr(info, text)
    return buffer.getvalue()


def store_model_config(data: bytes) -> str:
    """Keep an uploaded Hugging Face config.json under the app home; returns its path."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    target = app_home() / "models" / digest / "config.json"
    if not target.exists():
        write_atomic(target, data)
    return str(target)


def save_recommendation(choice: TraceChoice, rec: Any) -> str:
    """Store a Recommendation in the app's history; returns its id."""
    from recommender import history

    title = f"{rec.pick.label} on {rec.gpus}× {rec.gpu}, {rec.model}"
    rec_id = history.save_recommendation(
        store_cursor(), trace_digest=choice.digest, trace_name=choice.name, title=title,
        request_json=rec.request.model_dump_json(), body_json=rec.model_dump_json())
    _owned().recommendations.add(rec_id)
    return rec_id


# -- who sees what -----------------------------------------------------------------------------


class Owned(Record):
    """What this browser session profiled, recommended and ran (kept in st.session_state)."""

    profiles: set[tuple[str, str]] = Field(default_factory=set,
                                           description="(content digest, options JSON)")
    recommendations: set[str] = Field(default_factory=set, description="recommendation ids")
    runs: set[str] = Field(default_factory=set, description="benchmark run ids")


def _owned() -> Owned:
    owned = st.session_state.get(OWNED_KEY)
    if owned is None:
        owned = st.session_state[OWNED_KEY] = Owned()
    return owned


def shared_history() -> bool:
    """Whether every session sees the whole store ($SERVEFIT_SHARED_HISTORY; default no:
    a session sees what it profiled, recommended and ran itself).

    Raises:
        UsageError: the variable holds something other than a yes or a no.
    """
    raw = os.environ.get(SHARED_HISTORY_ENV_VAR, "").strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"", "0", "false", "no", "off"}:
        return False
    raise UsageError(f"${SHARED_HISTORY_ENV_VAR}={raw!r}: expected 1 or 0 (true or false)")


def remember_run(run_id: str) -> None:
    """Count a benchmark run this session started as its own."""
    _owned().runs.add(run_id)


def visible_profiles(entries: list[Any]) -> list[Any]:
    """The profile-history entries this session may see and open."""
    if shared_history():
        return entries
    mine = _owned().profiles
    return [e for e in entries if (e.trace_digest, e.options_json) in mine]


def visible_recommendations(entries: list[Any]) -> list[Any]:
    """The saved recommendations this session may see and open."""
    if shared_history():
        return entries
    mine = _owned().recommendations
    return [e for e in entries if e.rec_id in mine]


def visible_runs(runs: list[Any]) -> list[Any]:
    """The benchmark runs this session may see and compare."""
    if shared_history():
        return runs
    mine = _owned().runs
    return [r for r in runs if r.run_id in mine]


class Environment(Record):
    """What this machine offers for live validation (shown, never guessed silently)."""

    docker_url: str = Field(description="the Docker daemon's address the launcher would use")
    docker_socket: bool = Field(description="its socket is here (always True for tcp://)")
    nvidia_gpu: bool
    host_models_dir: str = Field(description="host path of the HF cache for sibling containers")


def environment() -> Environment:
    """The Docker daemon's socket, an NVIDIA GPU, and the host's HF cache path (for
    containers)."""
    import shutil

    from runners.docker_engine import daemon_url

    url = daemon_url()
    return Environment(
        docker_url=url,
        docker_socket=not url.startswith("unix://") or Path(url.removeprefix("unix://")).exists(),
        nvidia_gpu=shutil.which("nvidia-smi") is not None,
        host_models_dir=os.environ.get("SERVEFIT_HOST_MODELS")
        or str(Path.home() / ".cache" / "huggingface"))


@st.cache_data(show_spinner=False, max_entries=16)
def memory_plan_of(config_json: str, gpu: str, model: str) -> Any:
    """The per-GPU memory plan (recommender.memory.MemoryPlan) of a pick's config."""
    from engines.config import EngineConfig
    from recommender.catalog import get_gpu, get_model
    from recommender.memory import plan_memory

    return plan_memory(EngineConfig.model_validate_json(config_json), get_gpu(gpu),
                       get_model(model))


@st.cache_data(ttl=30, show_spinner=False, max_entries=16)
def local_engine_missing(config_json: str, venv: str | None) -> str | None:
    """Why the pick's engine cannot start as a local process here, or None
    (`runners.launch.local_prerequisite`; kept 30 s, it may start a Python)."""
    from engines.config import EngineConfig
    from runners.launch import local_prerequisite

    config = EngineConfig.model_validate_json(config_json)
    return local_prerequisite(config, Path(venv) if venv else None)


class BenchJob:
    """One live benchmark running on a background thread of this session.

    The thread only calls the runner; the view reads `samples`, `report` and `error` from a
    fragment that reruns every second. Each appended sample is a whole object, so a reader
    never sees half of one.
    """

    def __init__(self, request: Any) -> None:
        import threading

        self.request = request
        self.samples: list[Any] = []
        self.report: Any = None
        self.error: str | None = None
        self.launch_status = ""  # what the launch is doing, until the server is ready
        self.shown = False  # whether a full page rerun has shown the finished run
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servefit-bench", daemon=True)

    def start(self) -> BenchJob:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _launching(self, line: str) -> None:
        self.launch_status = line  # one str assignment: a reader sees the old or the new

    def _run(self) -> None:
        from core.errors import ServeFitError
        from runners.bench import run_bench

        try:
            self.report = run_bench(self.request, workspace=store_workspace(),
                                    progress=self.samples.append, stop=self.stop,
                                    launch_status=self._launching)
        except ServeFitError as exc:
            self.error = hide_home(str(exc))
        except Exception as exc:  # a bug still reaches the user as one line, and the log
            import logging

            logging.getLogger(__name__).exception("benchmark failed")
            self.error = f"the benchmark failed unexpectedly: {type(exc).__name__}: {exc}"
