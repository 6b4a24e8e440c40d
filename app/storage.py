"""Where the app keeps what users give it: the app home (`$SERVEFIT_APP_HOME`, default
`.servefit/app` in the working directory, so it survives a restart), the bundled sample, and
uploads (traces and model configs) stored under generated names, whole or not at all (the
browser's name is only shown). `TraceChoice` names a stored trace and the options it is read
with; `bundle_zip` packs an export bundle.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
import unicodedata
import uuid
import zipfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

import streamlit as st
from pydantic import Field

from core.atomic import write_atomic
from core.records import Record
from profiler.ingestion.options import IngestOptions

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
SAMPLE_LABEL = "Azure LLM inference trace 2023, conversation (CC-BY 4.0)"
HOME_ENV_VAR = "SERVEFIT_APP_HOME"
DEFAULT_HOME = Path(".servefit") / "app"
COPY_CHUNK_BYTES = 8 << 20
UPLOAD_FILE_NAME = "trace"  # every upload's stored name; the browser's is for display only
DISPLAY_NAME_CHARS = 120
STALE_INCOMING_S = 3600.0  # an upload's copy takes seconds; older temporaries are orphans


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
