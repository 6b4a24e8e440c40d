"""Cached library calls for the Streamlit views (keyed on real inputs: the file's bytes hash)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import streamlit as st

from profiler.profile import profile_trace
from profiler.schema import Profile
from profiler.workspace import Workspace

SAMPLE_TRACE = Path(__file__).resolve().parent.parent / "data" / "samples" / \
    "AzureLLMInferenceTrace_conv.csv"
APP_WORKSPACES = Path(".servefit") / "app"


@st.cache_data(show_spinner=False, max_entries=16)
def profile_file(data: bytes, name: str) -> Profile:
    """Profile an uploaded (or bundled) trace; one workspace per distinct file content.

    Each content hash gets its own DuckDB file, so browser sessions never write the same one.
    """
    digest = hashlib.sha256(data).hexdigest()[:16]
    with tempfile.TemporaryDirectory(prefix="servefit-upload-") as tmp:
        path = Path(tmp) / Path(name).name
        path.write_bytes(data)
        workspace = Workspace.resolve(APP_WORKSPACES / f"{digest}.duckdb")
        return profile_trace(str(path), workspace=workspace)
