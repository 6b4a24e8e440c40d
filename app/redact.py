"""What users see of the server's paths: errors name the user's file (not where the app
stores it, nor its gzip expansion) and say "the app's store" for the app home.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from app.storage import TraceChoice, app_home
from core.errors import ServeFitError

# profiler.ingestion.sources expands gzip/zstd uploads to <temp>/servefit-expand-*/<name>.plain
_EXPANSION_PATH = re.compile(r"\S*servefit-expand-[^\s/]+/[^\s:,]*")


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
