"""The load generator's fast transport: plain-HTTP/1.1 streaming POSTs on non-blocking sockets.

Why: aiohttp's response reader costs several microseconds per HTTP chunk (a streamed token is
one chunk), which caps one core well below the stub server. Here a response is parsed with
bytes operations, each read stamped with the time the kernel received it
(`runners.load.stamped_socket`), and fed to the same `SSEFeed`/`StreamState` as `client.send`, so
results mean exactly the same. Scope: `http://`,
keep-alive connections reused from an idle pool, chunked, Content-Length or close-delimited
bodies. Anything else (https) uses `client.send_body`.

Test seam: `RawClient(target, clock=..., connect=...)` (keyword-only). `clock` (default
`time.perf_counter`) stamps the write and the end of a request; the reads keep the stamp their
connection hands over. `connect` (default `open_stamped`) opens a connection for a `Receiver`;
a fake one delivers scripted reads with scripted stamps and records what was written when.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from time import perf_counter
from urllib.parse import urlsplit

from runners.load.client import Clock, SSEFeed, StreamState, http_error_text
from runners.load.schemas import RequestResult
from runners.load.stamped_socket import Receiver, StampedSocket, open_stamped

_MAX_HEAD = 64 * 1024
_MAX_ERROR_BODY = 4096
# Opens a connection to (host, port) reporting to the receiver; `open_stamped`'s signature.
Connect = Callable[[str, int, Receiver], Awaitable[StampedSocket]]


class _Batch:
    """Reads stamped on arrival, parsed once the loop's batch of I/O callbacks is over.

    Why: when many sockets are ready at once, parsing each read inside its callback would
    delay the stamps of every socket behind it; here a callback only stamps and queues.
    """

    __slots__ = ("busy", "items", "loop", "scheduled")
    items: list[tuple[_Conn, float, bytes]]

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.items, self.scheduled, self.busy = loop, [], False, False

    def add(self, conn: _Conn, now: float, data: bytes) -> None:
        self.items.append((conn, now, data))
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if self.busy:
            return  # called from inside a flush (a connection closed while parsing)
        self.busy = True
        try:
            while self.items:
                items, self.items = self.items, []
                for conn, now, data in items:
                    conn.process(now, data)
        finally:
            self.busy = False


class _Conn:
    """One connection; parses the response to the request in flight on it."""

    # Set by `connection_made`, which `open_stamped` calls before it returns: a `_Conn` is
    # only used once its connection is open.
    transport: StampedSocket

    def __init__(self, batch: _Batch, clock: Clock) -> None:
        self.batch, self.clock = batch, clock
        self.closed = False
        self.skip = b""  # what of the previous response's final CRLF has not arrived yet
        self.reset(None)

    def reset(self, feed: SSEFeed | None) -> None:
        self.feed, self.buf, self.in_head = feed, b"", True
        self.status, self.reason, self.keep_alive = 0, "", True
        self.mode, self.left, self.error_body = "", 0, b""
        self.waiter: asyncio.Future[str | None] | None = None
        self.got_bytes = False

    def connection_made(self, transport: StampedSocket) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.batch.flush()  # this connection's last reads first
        if self.waiter is None or self.waiter.done():
            return
        if self.mode == "close" and not self.in_head:
            self._done()  # a close-delimited body ends here
        else:
            self._finish("server closed the connection mid-response" if self.got_bytes
                         else "server closed the connection")

    def _finish(self, error: str | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(error)

    def received(self, now: float, data: bytes) -> None:
        """A read that reached this host at `now` (the connection's stamp: the kernel's, on
        perf_counter, for `open_stamped`)."""
        self.got_bytes = True
        self.batch.add(self, now, data)

    def process(self, now: float, data: bytes) -> None:
        """Parse one read that arrived at `now` (called after the loop's I/O batch)."""
        if self.waiter is None or self.waiter.done():
            return  # no response in flight (finished, timed out or cancelled): nothing to do
        if self.in_head:
            data = self.buf + data
            if self.skip and data.startswith(self.skip):
                data, self.skip = data[len(self.skip):], b""
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self.buf = data
                if len(data) > _MAX_HEAD:
                    self._abort("response head too large")
                return
            if not self._head(data[:end]):
                return
            data, self.buf = data[end + 4:], b""
        self._body(data, now)

    def _head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            self._abort(f"malformed HTTP status line {lines[0][:80]!r}")
            return False
        self.status = int(parts[1])
        self.reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        self.keep_alive = parts[0] == b"HTTP/1.1" and fields.get(b"connection") != b"close"
        if b"chunked" in fields.get(b"transfer-encoding", b""):
            self.mode, self.left = "chunked", -1
        elif b"content-length" in fields:
            self.mode, self.left = "length", int(fields[b"content-length"])
        else:
            self.mode, self.keep_alive = "close", False
        self.in_head = False
        if self.mode == "length" and self.left == 0:
            self._done()
        return True

    def _abort(self, message: str) -> None:
        self.keep_alive = False
        self._finish(message)
        self.transport.close()

    def _deliver(self, piece: bytes, now: float) -> None:
        if self.status != 200:
            self.error_body = (self.error_body + piece)[:_MAX_ERROR_BODY]
        elif self.feed is not None and not self.feed.feed(piece, now):
            self.keep_alive, self.feed = False, None  # error event: stop reading this stream
            self._finish(None)

    def _body(self, data: bytes, now: float) -> None:
        if self.mode == "chunked":
            self._chunked(data, now)
            return
        if self.mode == "length":
            piece, rest = data[: self.left], data[self.left:]
            self.left -= len(piece)
            if rest:
                self.keep_alive = False  # bytes beyond the body: do not reuse
        else:
            piece = data
        if piece:
            self._deliver(piece, now)
        if self.mode == "length" and self.left == 0:
            self._done()

    def _chunked(self, data: bytes, now: float) -> None:
        """Decode chunked framing; deliver this read's data bytes as one piece."""
        buf = self.buf + data if self.buf else data
        try:
            pos, pieces, finished = self._unframe(buf)
        except ValueError as exc:
            self._abort(f"malformed chunked body: {exc}")
            return
        self.buf = buf[pos:]
        if pieces:
            self._deliver(b"".join(pieces), now)
        if finished:
            rest, self.buf = self.buf, b""
            if rest in (b"", b"\r"):
                self.skip = b"\r\n"[len(rest):]  # the rest of the final CRLF comes later
            elif rest != b"\r\n":
                self.keep_alive = False  # trailers or stray bytes: do not reuse
            self._done()

    def _unframe(self, buf: bytes) -> tuple[int, list[bytes], bool]:
        """(bytes consumed, chunk data pieces, last chunk seen). `self.left`: data bytes
        still due in the current chunk (> 0), its CRLF next (-2), or a size line next (-1).
        The common case, a whole chunk in the read, takes one pass of the loop's first branch
        (this loop runs once per streamed token)."""
        pieces: list[bytes] = []
        append, find, starts = pieces.append, buf.find, buf.startswith
        pos, n, left = 0, len(buf), self.left
        while pos < n:
            if left == -1:  # a size line
                eol = find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(buf[pos:eol], 16)
                except ValueError:  # a chunk extension (";name=value"), or garbage: raises
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if size == 0:
                    self.left = -1
                    return pos, pieces, True
                end = pos + size
                if starts(b"\r\n", end):  # the whole chunk and its CRLF are here
                    append(buf[pos:end])
                    pos = end + 2
                else:
                    left = size
            elif left == -2:  # the CRLF after a chunk's data
                if n - pos < 2:
                    break
                if not starts(b"\r\n", pos):
                    raise ValueError("no CRLF after chunk data")
                pos, left = pos + 2, -1
            else:  # the rest of a chunk split across reads
                take = min(left, n - pos)
                append(buf[pos:pos + take])
                pos, left = pos + take, left - take
                if left:
                    break
                left = -2
        self.left = left
        return pos, pieces, False

    def _done(self) -> None:
        now = self.clock()
        if self.status == 200 and self.feed is not None:
            self.feed.close(now)
        self._finish(None)


class RawClient:
    """Streaming POSTs to one `http://` endpoint over a pool of kept-alive connections.

    `clock` and `connect` are the test seam (module docstring); results' stamps are on
    `clock`'s scale, so a `connect` other than `open_stamped` must stamp reads on it too.
    """

    def __init__(self, target: str, *, clock: Clock = perf_counter,
                 connect: Connect | None = None) -> None:
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the raw transport takes http:// URLs only, not {target!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = self.host if parts.port is None else f"{self.host}:{parts.port}"
        self.head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
                     "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                     "Content-Length: ").encode()
        self.idle: deque[_Conn] = deque()
        self.batch: _Batch | None = None
        self.clock = clock
        # Looked up here, not bound as a default: a test may replace the module's
        # `open_stamped` for clients built deep inside a run.
        self.connect = open_stamped if connect is None else connect

    async def _conn(self) -> tuple[_Conn, bool]:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn, True
        return await self._open(), False

    async def _open(self) -> _Conn:
        """A new connection, its reads queued on this loop's `_Batch`."""
        loop = asyncio.get_running_loop()
        if self.batch is None or self.batch.loop is not loop:
            self.batch = _Batch(loop)
        conn = _Conn(self.batch, self.clock)
        await self.connect(self.host, self.port, conn)
        return conn

    async def warm(self, n: int) -> None:
        """Open connections until `n` are idle, so that a run's first requests do not wait
        for connection setup (nor time it as part of their TTFT)."""
        missing = n - sum(not conn.closed for conn in self.idle)
        if missing <= 0:
            return
        opened = await asyncio.gather(*(self._open() for _ in range(missing)),
                                      return_exceptions=True)
        # A connection that failed is left to the run's requests, which meet the same failure.
        self.idle.extend(c for c in opened if isinstance(c, _Conn))

    async def _exchange(self, body: bytes, feed: SSEFeed, used: list[_Conn],
                        stamp: list[float]) -> str | None:
        """Write the request and wait for the response (the connection goes into `used`, the
        write instant into `stamp`); a reused connection the server had already closed
        (nothing came back) is retried."""
        loop = asyncio.get_running_loop()
        while True:
            conn, reused = await self._conn()
            used[:] = [conn]
            conn.reset(feed)
            conn.waiter = loop.create_future()
            data = b"%s%d\r\n\r\n%s" % (self.head, len(body), body)
            stamp[0] = self.clock()  # TTFT runs from the send, not from connection setup
            conn.transport.write(data)
            try:
                error = await conn.waiter
            except BaseException:
                conn.transport.close()
                raise
            if error is None or not reused or conn.got_bytes:
                return error

    async def send(self, body: bytes, *, timeout_s: float) -> RequestResult:
        """`client.send_body` over this pool: same stamps, same failure rows."""
        acc = StreamState()
        used: list[_Conn] = []
        error: str | None = None
        stamp = [self.clock()]  # moved to the write; stays here if no write happens
        try:
            async with asyncio.timeout(timeout_s):
                error = await self._exchange(body, SSEFeed(acc), used, stamp)
        except TimeoutError:
            acc.fail("timeout", f"no complete response within {timeout_s:g} s")
        except OSError as exc:
            acc.fail("connection", f"{type(exc).__name__}: {exc}")
        end = self.clock()
        sent_at = stamp[0]
        if not used:
            return acc.result(sent_at, end, None)
        conn = used[0]
        if acc.error is not None:  # timed out: the connection is mid-response
            conn.transport.close()
            return acc.result(sent_at, end, conn.status or None)
        if error is not None:
            acc.fail("connection", error)
        elif conn.status != 200:
            acc.fail("http", http_error_text(conn.status, conn.reason, conn.error_body))
        if error is None and conn.keep_alive and not conn.closed and acc.error is None:
            self.idle.append(conn)
        else:
            conn.transport.close()
        return acc.result(sent_at, end, conn.status or None)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().transport.close()
