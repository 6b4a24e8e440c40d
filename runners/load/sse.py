"""The one incremental Server-Sent-Events parser, shared by completions and chat streams.

Pure and I/O-free: `feed()` bytes as they arrive (split anywhere, several events per read,
`\\n` or `\\r\\n` line ends, `:` comment/ping lines, `data: [DONE]`) and get decoded events.
Splits with bytes methods only; there is no per-byte Python loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from runners.load.failures import one_line

EventKind = Literal["data", "done", "error", "malformed"]


@dataclass(slots=True)
class SSEEvent:
    """One decoded event.

    `kind` is "data" (a JSON object in `data`), "done" (`data: [DONE]`), "error" (an error
    object inside the stream; `error` holds its one-line message, `data` the object) or
    "malformed" (a data payload that is not a JSON object; `error` says why).
    """

    kind: EventKind
    data: dict[str, Any] | None = None
    error: str | None = None


def _error_message(obj: dict[str, Any]) -> str | None:
    """The message of an in-stream error object, or None when `obj` is a normal chunk."""
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            msg = err.get("message") or json.dumps(err)
            code = err.get("code") or err.get("type")
            return one_line(f"{code}: {msg}" if code else str(msg))
        return one_line(str(err))
    if obj.get("object") == "error":  # vLLM's bare ErrorResponse shape
        return one_line(str(obj.get("message") or json.dumps(obj)))
    return None


def decode_payload(payload: bytes, event_name: bytes | None = None) -> SSEEvent:
    """Turn the joined `data:` payload of one event into an `SSEEvent`."""
    if payload == b"[DONE]":
        return SSEEvent("done")
    try:
        obj = json.loads(payload)
    except ValueError as exc:
        return SSEEvent("malformed", error=one_line(f"bad JSON in SSE data ({exc}): {payload!r}"))
    if not isinstance(obj, dict):
        return SSEEvent("malformed", error=one_line(f"SSE data is not a JSON object: {payload!r}"))
    msg = _error_message(obj)
    if msg is not None:
        return SSEEvent("error", data=obj, error=msg)
    if event_name == b"error":
        return SSEEvent("error", data=obj, error=one_line(f"error event: {json.dumps(obj)}"))
    return SSEEvent("data", data=obj)


def _parse_block(block: bytes) -> SSEEvent | None:
    """Parse one event block (lines without the blank separator); None if it has no data."""
    if block.startswith(b"data:") and b"\n" not in block:  # the common single-line case
        value = block[5:]
        return decode_payload(value[1:] if value[:1] == b" " else value)
    datas: list[bytes] = []
    event_name: bytes | None = None
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            datas.append(value)
        elif field == b"event":
            event_name = value
        # id:, retry: and unknown fields are ignored, as the SSE spec says.
    if not datas:
        return None
    return decode_payload(b"\n".join(datas), event_name)


class SSEParser:
    """Incremental parser: `feed()` returns the events completed by the new bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Add bytes; return every event whose terminating blank line has now arrived."""
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # A trailing lone "\r" may be the first half of "\r\n": keep it for the next feed.
            tail = b"\r" if buf.endswith(b"\r") else b""
            body = buf[:-1] if tail else buf
            buf = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        events = []
        for block in blocks:
            event = _parse_block(block.strip(b"\n")) if block else None
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: parse what is left (an event the server did not terminate)."""
        rest, self._buf = self._buf.rstrip(b"\r\n"), b""
        if not rest:
            return []
        event = _parse_block(rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n"))
        return [event] if event is not None else []


def parse_all(data: bytes) -> list[SSEEvent]:
    """Parse a whole recorded stream at once (tests and offline tools)."""
    parser = SSEParser()
    return parser.feed(data) + parser.close()
