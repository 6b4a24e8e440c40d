"""The request function: send one streaming completion or chat request and time it exactly.

`send()` never raises for a request-level failure; it returns a `RequestResult` with
`success=False` and a one-line `error`. Timing follows DESIGN §3: TTFT at the first chunk that
carries content, E2E at the last such chunk (not the usage chunk, not `[DONE]`).

Test seam: `send`/`send_body` read time only through their keyword-only `clock` (default
`time.perf_counter`): once before the POST, once per body read as it is handed over, once at
the end. A test passes a scripted clock and a fake session and asserts the stamps exactly.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from time import perf_counter
from typing import Any

import aiohttp
import orjson

from runners.load.failures import ErrorKind, one_line
from runners.load.schemas import Api, RequestResult, RequestSpec
from runners.load.sse import SSEEvent, SSEParser, decode_payload

_PATHS: dict[Api, str] = {"completions": "/completions", "chat": "/chat/completions"}
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_MAX_ERROR_BODY = 4096
_loads = orjson.loads
URL_SCHEMES = ("http", "https")  # a server is reached over HTTP; file://, ftp://… are refused
Clock = Callable[[], float]  # seconds; every stamp of one result comes from the same clock


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is the server's answer: the tool talks to the server it was given, never to a
    host a reply names (a 307 to another host was followed for /health)."""

    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


def get_status(url: str, *, timeout_s: float) -> int:
    """The HTTP status a GET of `url` answers, redirects not followed.

    Raises:
        OSError, ValueError, http.client.HTTPException: no HTTP answer (refused, silent past
            `timeout_s`, not speaking HTTP).
    """
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:  # 3xx (not followed), 4xx, 5xx
        return int(exc.code)


def check_http_url(url: str | None) -> str | None:
    """`url` itself when it is an `http://` or `https://` URL with a host (and a valid port),
    or None (no URL given).

    Raises:
        ValueError: any other URL, with what is wrong (pydantic validators turn it into the
            option's one-line error).
    """
    if url is None:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - reading it validates it
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in URL_SCHEMES:
        raise ValueError(f"{url!r}: only http:// and https:// URLs are accepted")
    if not parts.hostname:
        raise ValueError(f"{url!r} is a URL without a host")
    return url


def endpoint_url(url: str, api: Api) -> str:
    """The POST target for `api`.

    `url` is either a full endpoint (ending in `/completions`), used as is, or a server base:
    `http://h:p` gets `/v1/...` appended, `http://h:p/v1` (or any `.../v1`) gets the API path.
    """
    url = url.rstrip("/")
    if url.endswith("/completions"):
        return url
    if not url.endswith("/v1"):
        url += "/v1"
    return url + _PATHS[api]


def build_payload(spec: RequestSpec) -> dict[str, Any]:
    """The JSON body: the spec's fields, streaming with the usage chunk, plus `extra_body`."""
    body: dict[str, Any] = {"model": spec.model}
    if spec.api == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    body.update(spec.extra_body)
    body["max_tokens"] = spec.max_tokens
    body["ignore_eos"] = spec.ignore_eos
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


class StreamState:
    """Per-request accumulator of the stamps and counts (no validation on the hot path)."""

    __slots__ = (
        "chunk_times",
        "chunk_tokens",
        "counts_complete",
        "done",
        "error",
        "error_kind",
        "output_tokens",
        "prompt_tokens",
        "reported_so_far",
    )

    def __init__(self) -> None:
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.counts_complete = True
        self.done = False  # `data: [DONE]` seen: the stream has ended, whatever follows
        self.prompt_tokens: int | None = None
        self.output_tokens: int | None = None
        self.reported_so_far = 0  # cumulative completion_tokens seen in per-chunk usage
        self.error: str | None = None
        self.error_kind: ErrorKind | None = None

    def on_chunk(self, obj: dict[str, Any], now: float) -> None:
        """Record one decoded data chunk that arrived at `now`."""
        self.on_chunks((obj,), now)

    def on_chunks(self, objs: list[dict[str, Any]] | tuple[dict[str, Any], ...],
                  now: float) -> None:
        """Record the decoded data chunks of one read, in order, all stamped `now`."""
        append = self.chunk_times.append
        for obj in objs:
            if obj.get("usage") is None:  # the common one-choice chunk, without the general loop
                choices = obj.get("choices")
                if type(choices) is list and len(choices) == 1:
                    choice = choices[0]
                    if type(choice) is dict and "token_ids" not in choice:
                        delta = choice.get("delta")
                        src = delta if type(delta) is dict else choice
                        if (src.get("text") or src.get("content") or src.get("reasoning_content")
                                or src.get("reasoning")):
                            append(now)
                            self.counts_complete = False  # no count for this chunk
                        continue
            self._on_chunk(obj, now)

    def _on_chunk(self, obj: dict[str, Any], now: float) -> None:
        usage = obj.get("usage")
        n_reported: int | None = None
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            total = usage.get("completion_tokens")
            if isinstance(total, int):
                self.output_tokens = total
                n_reported = total - self.reported_so_far
                self.reported_so_far = total
        choices = obj.get("choices")
        if not choices:
            return  # the usage-only trailer: never a content chunk
        has_content = False
        ids_count: int | None = None
        for choice in choices:
            delta = choice.get("delta")
            src = delta if isinstance(delta, dict) else choice
            if (src.get("text") or src.get("content") or src.get("reasoning_content")
                    or src.get("reasoning")):
                has_content = True
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                ids_count = (ids_count or 0) + len(ids)
        if not has_content:
            return
        self.chunk_times.append(now)
        count = ids_count if ids_count is not None else n_reported
        if count is None:
            self.counts_complete = False
        else:
            self.chunk_tokens.append(count)

    def fail(self, kind: ErrorKind, message: str) -> None:
        if self.error is None:
            self.error_kind, self.error = kind, one_line(message)

    def result(self, sent_at: float, end_at: float, status: int | None) -> RequestResult:
        if self.error is None and not self.chunk_times:
            self.fail("no_content", "stream ended without any content chunk")
        times = self.chunk_times
        # Every field is built here with its declared type: skip validation on the hot path.
        return RequestResult.model_construct(
            success=self.error is None,
            error=self.error,
            error_kind=self.error_kind,
            http_status=status,
            sent_at_s=sent_at,
            first_token_at_s=times[0] if times else None,
            last_token_at_s=times[-1] if times else None,
            end_at_s=end_at,
            chunk_times_s=times,
            chunk_tokens=self.chunk_tokens if times and self.counts_complete else None,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
        )


def http_error_text(status: int, reason: str | None, body: bytes) -> str:
    """`HTTP 404 Not Found: <the server's error message, or the raw body>`."""
    event = decode_payload(body[:_MAX_ERROR_BODY])
    text = event.error if event.kind == "error" and event.error else body.decode("utf-8", "replace")
    head = f"HTTP {status} {reason}" if reason else f"HTTP {status}"
    return f"{head}: {text[:_MAX_ERROR_BODY]}"


def _on_event(event: SSEEvent, acc: StreamState, now: float) -> bool:
    """Apply one event; False when it ends the request as a failure."""
    if acc.done and event.kind != "done":  # tokens after the end were counted as output
        acc.fail("malformed", "data after data: [DONE]")
        return False
    if event.kind == "data":
        acc.on_chunk(event.data, now)  # type: ignore[arg-type]
    elif event.kind == "done":
        acc.done = True
    else:
        acc.fail("stream_error" if event.kind == "error" else "malformed", event.error or "")
        return False
    return True


def _fast_events(data: bytes, acc: StreamState, now: float) -> bool | None:
    """Apply a read made only of whole one-line `data: ` events (the common case) directly.

    Returns None when `data` is not of that shape (the caller feeds the full parser), else
    as `_on_event`. Anything unusual inside an event (bad JSON, an error object) is decoded by
    `decode_payload`, so the outcome is the parser's.
    """
    if not (data.startswith(b"data: ") and data.endswith(b"\n\n")):
        return None
    payloads = data[6:-2].split(b"\n\ndata: ")
    if data.count(b"\n") != 2 * len(payloads):  # another line or field somewhere
        return None
    objs: list[dict[str, Any]] = []
    keep = objs.append
    for payload in payloads:
        try:
            obj = _loads(payload)
        except ValueError:
            obj = None
        if (type(obj) is dict and "error" not in obj and obj.get("object") != "error"
                and not acc.done):
            keep(obj)
        else:  # [DONE], an error, or anything after [DONE]: the parser's own path
            acc.on_chunks(objs, now)  # the chunks before it, in order
            objs.clear()
            if not _on_event(decode_payload(payload), acc, now):
                return False
    acc.on_chunks(objs, now)
    return True


class SSEFeed:
    """Feeds a response body, as it arrives from any transport, into a `StreamState`.

    Events complete at the read that brings their terminating blank line. Reads of plain
    `data: ` events take `_fast_events`; the first read of any other shape (CR line ends,
    comments, multi-line events…) hands the rest of the stream to `SSEParser`.
    """

    __slots__ = ("acc", "parser", "tail")

    def __init__(self, acc: StreamState) -> None:
        self.acc = acc
        self.parser: SSEParser | None = None
        self.tail = b""  # the fast path's unterminated last event

    def feed(self, piece: bytes, now: float) -> bool:
        """Take the bytes of one read stamped `now`; False after an error event (stop)."""
        acc, data = self.acc, piece
        if self.parser is None:
            if self.tail:
                data, self.tail = self.tail + piece, b""
            cut = data.rfind(b"\n\n") + 2
            ok = None if b"\r" in data else (
                _fast_events(data[:cut], acc, now) if cut > 1 else True)
            if ok is not None:
                self.tail = data[cut:] if cut > 1 else data
                return ok
            self.parser = SSEParser()
        return all(_on_event(event, acc, now) for event in self.parser.feed(data))

    def close(self, now: float) -> None:
        """End of body: an event the server did not terminate still counts."""
        if self.parser is None:
            self.parser = SSEParser()
            self.parser.feed(self.tail)  # no blank line in it: it only buffers
        for event in self.parser.close():
            if not _on_event(event, self.acc, now):
                return


async def _consume(resp: aiohttp.ClientResponse, acc: StreamState, clock: Clock) -> None:
    """Read the SSE body, stamping each read once (`clock()` as it is handed over); stop at
    the first error event."""
    feed = SSEFeed(acc)
    async for piece in resp.content.iter_any():
        if not feed.feed(piece, clock()):
            return
    feed.close(clock())


async def send(
    session: aiohttp.ClientSession, url: str, spec: RequestSpec, *, timeout_s: float,
    clock: Clock = perf_counter,
) -> RequestResult:
    """Send `spec` as one streaming request and return its timed result.

    Args:
        session: an open aiohttp session (its connector bounds the connections).
        url: a server base (`http://h:p` or `.../v1`) or a full `/completions` endpoint.
        spec: what to send.
        timeout_s: bound on the whole request, connect to end of stream, in seconds.
        clock: the source of every stamp (tests script it; see the module docstring).

    Returns:
        A `RequestResult`; stamps are `clock()` seconds (`time.perf_counter()` by default).
        Never raises for an HTTP error, timeout, connection error, in-stream error, malformed
        data or an empty stream: those are `success=False` rows. Cancellation still propagates.
    """
    body = json.dumps(build_payload(spec)).encode()
    return await send_body(session, endpoint_url(url, spec.api), body, timeout_s=timeout_s,
                           clock=clock)


async def send_body(
    session: aiohttp.ClientSession, target: str, body: bytes, *, timeout_s: float,
    clock: Clock = perf_counter,
) -> RequestResult:
    """`send()` for a pre-encoded JSON body posted to the full endpoint URL `target`.

    The load generator's hot path: no spec validation, no encoding; same result semantics.
    """
    acc = StreamState()
    status: int | None = None
    sent_at = clock()
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(target, data=body, headers=_JSON_HEADERS,
                                    allow_redirects=False) as resp:
                status = resp.status
                if status != 200:
                    raw = await resp.read()
                    acc.fail("http", http_error_text(status, resp.reason, raw))
                else:
                    await _consume(resp, acc, clock)
    except TimeoutError:
        acc.fail("timeout", f"no complete response within {timeout_s:g} s")
    except aiohttp.ClientError as exc:
        acc.fail("connection", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a request never raises; keep the surprise as data
        acc.fail("client", f"{type(exc).__name__}: {exc}")
    return acc.result(sent_at, clock(), status)
