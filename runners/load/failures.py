"""The kinds of per-request failure the runners record, and their one-line messages.

Per-request failures are never raised: they are `RequestResult(success=False, error_kind=…)`
rows. Run-level problems (launch, readiness, bad spec) raise `core.errors.RunnerError`.
"""

from __future__ import annotations

from typing import Literal

from core.errors import printable

ErrorKind = Literal[
    "http",  # non-200 status
    "timeout",  # the whole request exceeded timeout_s
    "connection",  # refused, reset, payload cut short, DNS…
    "stream_error",  # an error event inside a 200 stream
    "malformed",  # an SSE data line that is not a JSON object
    "no_content",  # the stream ended without any content chunk
    "client",  # anything else raised while sending (a bug on our side, kept as data)
    "cancelled",  # the run was stopped while the request was in flight
]

_MAX_ERROR_CHARS = 300


def one_line(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    """Collapse whitespace, show control characters as escapes (`core.errors.printable`) and
    cut `text` to `limit` characters (an ellipsis marks the cut)."""
    flat = " ".join(printable(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
