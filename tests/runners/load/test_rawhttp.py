"""The raw HTTP/1.1 transport on the wire: framing a real socket server writes byte by byte
(chunked, Content-Length, close-delimited, trailers), keep-alive reuse, a stale kept-alive
connection, a broken status line. (Stream semantics over both transports: test_client.py.)

No assertion here reads a wall-clock budget. What the transport stamps when is checked on a
`ScriptedClock` with a `FakeWire` (the `connect` seam of `RawClient`) that hands over scripted
reads with scripted kernel stamps and records what was asked when; against the real server,
timing claims are orderings of stamps on one clock, with the server held at a gate where the
order matters. How accurate the stamps are on a real clock is bench/client_timing.py's business.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Literal

import pytest

from runners.load import stamped_socket
from runners.load.rawhttp import RawClient
from runners.load.stamped_socket import Receiver, StampedSocket, open_stamped

pytestmark = pytest.mark.timeout(60)


def _sse(*texts: str, usage: tuple[int, int] | None = None) -> bytes:
    out = b"".join(b"data: " + json.dumps({"choices": [{"index": 0, "text": t}]}).encode()
                   + b"\n\n" for t in texts)
    if usage:
        u = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        out += b"data: " + json.dumps({"choices": [], "usage": u}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def _chunked(body: bytes, size: int = 10, trailer: bytes = b"") -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n" + trailer + b"\r\n"


HEAD_CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
START_S = 100.0  # the scripted clock's reading when a test starts
LAG_S = 0.125  # a fake read is handed over this long after its kernel stamp (a busy loop)
URL = "http://127.0.0.1:9/v1/completions"  # a fake wire's target: never contacted


class ScriptedClock:
    """A clock that reads `now_s`, which only the fakes move (binary fractions, so that
    differences of stamps are exact); `readings` records every reading."""

    def __init__(self, now_s: float = START_S) -> None:
        self.now_s = now_s
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append(self.now_s)
        return self.now_s


@dataclass
class Reply:
    """What a fake connection answers one request with: `reads`, (kernel stamp, bytes) in
    order, each handed over on a loop turn of its own; then it waits (`"wait"`: no more bytes)
    or the connection is lost without another byte (`"lose"`)."""

    reads: list[tuple[float, bytes]] = field(default_factory=list)
    then: Literal["wait", "lose"] = "wait"


def sse_reply(reads: list[tuple[float, bytes]], end_s: float | None) -> Reply:
    """A 200 chunked response: the head comes with the first read, each read's bytes are one
    HTTP chunk, and the last chunk arrives at `end_s` (None: the body never ends)."""
    framed = [(at, b"%x\r\n%s\r\n" % (len(data), data)) for at, data in reads]
    if end_s is not None:
        framed.append((end_s, b"0\r\n\r\n"))
    at, data = framed[0]
    framed[0] = (at, HEAD_CHUNKED + data)
    return Reply(framed)


class FakeWire:
    """A `RawClient` `connect`: fake connections that answer each request written on them with
    the next scripted `Reply`, on a `ScriptedClock`.

    Opening a connection takes `connect_s` scripted seconds. A read stamped `t` is handed over
    while the clock reads `t + lag_s`: the loop got round to it late, as on a busy machine.
    `events` records ("connect" | "write" | "close", clock reading, connection number).
    """

    def __init__(self, clock: ScriptedClock, replies: list[Reply], *, lag_s: float = LAG_S,
                 connect_s: float = 0.0) -> None:
        self.clock, self.replies = clock, deque(replies)
        self.lag_s, self.connect_s = lag_s, connect_s
        self.events: list[tuple[str, float, int]] = []
        self.written: list[bytes] = []
        self.opened = 0

    async def __call__(self, host: str, port: int, receiver: Receiver) -> FakeConnection:
        self.opened += 1
        self.events.append(("connect", self.clock.now_s, self.opened))
        self.clock.now_s += self.connect_s
        conn = FakeConnection(self, receiver, self.opened)
        receiver.connection_made(conn)  # the part of StampedSocket that RawClient uses
        return conn


class FakeConnection:
    """One fake connection: `write` (answered by the wire's next reply) and `close`."""

    def __init__(self, wire: FakeWire, receiver: Receiver, number: int) -> None:
        self.wire, self.receiver, self.number = wire, receiver, number
        self.closed = False

    def write(self, data: bytes) -> None:
        wire = self.wire
        wire.events.append(("write", wire.clock.now_s, self.number))
        wire.written.append(data)
        asyncio.get_running_loop().call_soon(self._deliver, wire.replies.popleft(), 0)

    def _deliver(self, reply: Reply, i: int) -> None:
        if self.closed:
            return
        if i == len(reply.reads):
            if reply.then == "lose":
                self.closed = True
                self.receiver.connection_lost(None)
            return
        at, data = reply.reads[i]
        self.wire.clock.now_s = at + self.wire.lag_s
        self.receiver.received(at, data)
        asyncio.get_running_loop().call_soon(self._deliver, reply, i + 1)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.wire.events.append(("close", self.wire.clock.now_s, self.number))
            asyncio.get_running_loop().call_soon(self.receiver.connection_lost, None)


def _run_scripted(wire: FakeWire, n: int = 1, timeout_s: float = 5.0):
    async def go():
        client = RawClient(URL, clock=wire.clock, connect=wire)
        try:
            return [await client.send(b'{"x": 1}', timeout_s=timeout_s) for _ in range(n)]
        finally:
            client.close()

    return asyncio.run(go())


class _Tap:
    """A `Receiver` in front of another that reports each read (stamp, bytes) first."""

    def __init__(self, inner: Receiver, on_read: Callable[[float, bytes], None]) -> None:
        self.inner, self.on_read = inner, on_read

    def connection_made(self, transport: StampedSocket) -> None:
        self.inner.connection_made(transport)

    def received(self, now: float, data: bytes) -> None:
        self.on_read(now, data)
        self.inner.received(now, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)


def tapped(on_read: Callable[[float, bytes], None]):
    """`open_stamped` for a `RawClient`'s `connect`, with every read reported to `on_read`."""

    async def connect(host: str, port: int, receiver: Receiver) -> StampedSocket:
        return await open_stamped(host, port, _Tap(receiver, on_read))

    return connect


class WireServer:
    """asyncio socket server in a thread: answers each request with `self.response` (raw
    bytes), written `step` bytes at a time; closes after it when `close_after`."""

    def __init__(self) -> None:
        self.response = b""
        self.step = 0
        self.close_after = False
        self.hold_last = 0  # write the response's last N bytes 50 ms after the rest
        self.gate: threading.Event | None = None  # if set: the held bytes wait for it instead
        self.wrote_held = threading.Event()  # the held bytes are in the socket
        self.connections = 0
        self.requests = 0
        self.events: list[str] = []  # "conn" / "req", in the order the server saw them
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        assert self._ready.wait(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.events.append("conn")
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                self.requests += 1
                self.events.append("req")
                data, step = self.response, self.step or len(self.response)
                held = data[len(data) - self.hold_last:] if self.hold_last else b""
                data = data[:len(data) - len(held)]
                for i in range(0, len(data), step):
                    writer.write(data[i:i + step])
                    await writer.drain()
                if held:
                    if self.gate is None:
                        await asyncio.sleep(0.05)
                    else:
                        await self._loop.run_in_executor(None, self.gate.wait, 10)
                    writer.write(held)  # a small write on a drained socket: sent right here
                    await writer.drain()
                    self.wrote_held.set()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/completions"


@pytest.fixture
def wire() -> Iterator[WireServer]:
    yield WireServer()


def _run(url: str, n: int = 1, timeout_s: float = 5.0):
    async def go():
        client = RawClient(url)
        try:
            return [await client.send(b'{"x": 1}', timeout_s=timeout_s) for _ in range(n)]
        finally:
            client.close()

    return asyncio.run(go())


@pytest.mark.parametrize("step", [1, 3, 7, 64])
def test_chunked_framing_split_anywhere(wire, step):
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", "b", "c", usage=(4, 3)), size=17)
    wire.step = step
    results = _run(wire.url, n=2)
    for r in results:
        assert r.success and len(r.chunk_times_s) == 3
        assert (r.prompt_tokens, r.output_tokens, r.http_status) == (4, 3, 200)
    assert wire.connections == 1 and wire.requests == 2  # kept alive and reused


@pytest.mark.parametrize("held", [1, 2])
def test_final_crlf_in_a_later_read_keeps_the_connection(wire, held):
    """The body's last CRLF (or its "\\n" alone) arrives after the rest: still reusable."""
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", usage=(1, 1)))
    wire.hold_last = held
    results = _run(wire.url, n=2)
    assert all(r.success for r in results)
    assert wire.connections == 1 and wire.requests == 2


def test_content_length_body(wire):
    body = _sse("a", "b", usage=(2, 2))
    wire.response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    wire.step = 5
    results = _run(wire.url, n=2)
    assert all(r.success and len(r.chunk_times_s) == 2 for r in results)
    assert wire.connections == 1


def test_close_delimited_body(wire):
    wire.response = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + _sse("a", usage=(1, 1))
    wire.close_after = True
    results = _run(wire.url, n=2)
    assert all(r.success and r.output_tokens == 1 for r in results)
    assert wire.connections == 2  # not reused after a close-delimited body


def test_stale_kept_alive_connection_is_retried(wire):
    body = _sse("a", usage=(1, 1))
    wire.response = HEAD_CHUNKED + _chunked(body)  # says keep-alive, then closes anyway
    wire.close_after = True

    async def go():
        client = RawClient(wire.url)
        first = await client.send(b"{}", timeout_s=5)
        await asyncio.sleep(0.2)  # the server's close reaches the pooled connection
        second = await client.send(b"{}", timeout_s=5)
        client.close()
        return first, second

    first, second = asyncio.run(go())
    assert first.success and second.success and wire.connections == 2


def test_trailers_end_the_body_and_stop_reuse(wire):
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", "b"), trailer=b"X-Check: 1\r\n")
    results = _run(wire.url, n=2)
    assert all(r.success and len(r.chunk_times_s) == 2 for r in results)
    assert wire.connections == 2


def test_http_error_body_is_the_message(wire):
    body = json.dumps({"object": "error", "message": "model not found"}).encode()
    wire.response = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    (r,) = _run(wire.url)
    assert not r.success and r.error_kind == "http" and r.http_status == 404
    assert r.error == "HTTP 404 Not Found: model not found"


def test_broken_status_line_is_a_connection_failure(wire):
    wire.response = b"HTTX/1.1 200 OK\r\n\r\n"
    (r,) = _run(wire.url)
    assert not r.success and r.error_kind == "connection" and "status line" in r.error


def test_only_plain_http():
    with pytest.raises(ValueError, match="http://"):
        RawClient("https://example.org/v1/completions")


@pytest.mark.parametrize("framing", [b"zz\r\nabc\r\n0\r\n\r\n", b"3\r\nabcXY0\r\n\r\n"])
def test_broken_chunk_framing_is_a_connection_failure(wire, framing):
    wire.response = HEAD_CHUNKED + framing
    (r,) = _run(wire.url)
    assert not r.success and r.error_kind == "connection" and "chunked" in r.error


def test_warm_opens_the_connections_before_any_request(wire):
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", usage=(1, 1)))

    async def go():
        client = RawClient(wire.url)
        await client.warm(3)
        await client.warm(3)  # already there: nothing more is opened
        while wire.connections < 3:  # the server has accepted them (its order, not a delay)
            await asyncio.sleep(0.01)
        results = await asyncio.gather(*(client.send(b"{}", timeout_s=5) for _ in range(3)))
        client.close()
        return results

    results = asyncio.run(go())
    assert all(r.success for r in results)
    assert wire.events == ["conn"] * 3 + ["req"] * 3


def test_warm_connections_are_opened_before_and_reused_by_the_requests():
    """On the fake wire: `warm(2)` opens two connections and the two requests write on them;
    no request opens one of its own."""
    clock = ScriptedClock()
    reply = [(100.5, _sse("a", usage=(1, 1)))]
    wire = FakeWire(clock, [sse_reply(reply, 100.75), sse_reply(reply, 100.75)],
                    connect_s=0.25)

    async def go():
        client = RawClient(URL, clock=clock, connect=wire)
        await client.warm(2)
        await client.warm(2)
        results = await asyncio.gather(*(client.send(b"{}", timeout_s=5) for _ in range(2)))
        client.close()
        return results

    results = asyncio.run(go())
    assert all(r.success for r in results)
    assert [(kind, n) for kind, _, n in wire.events[:4]] == [
        ("connect", 1), ("connect", 2), ("write", 2), ("write", 1)]  # the last opened first
    assert wire.opened == 2


def test_the_clock_starts_at_the_write_not_at_connection_setup():
    """A connection that takes 0.25 scripted seconds to open: the request is stamped sent at
    its write, after the setup, and its TTFT runs from there."""
    clock = ScriptedClock()
    wire = FakeWire(clock, [sse_reply([(100.5, _sse("a", usage=(1, 1)))], 100.75)],
                    connect_s=0.25)
    (r,) = _run_scripted(wire)
    assert wire.events[:2] == [("connect", 100.0, 1), ("write", 100.25, 1)]
    assert r.success and r.sent_at_s == 100.25
    assert r.ttft_s == 0.25 and r.first_token_at_s == 100.5


def test_connection_setup_is_not_part_of_ttft(wire, monkeypatch):
    """A real connection that is slow to open: the request is stamped sent after it is up."""
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", usage=(1, 1)))
    connected: list[float] = []

    async def go():
        loop = asyncio.get_running_loop()
        connect = loop.sock_connect

        async def slow_connect(*args, **kwargs):
            await asyncio.sleep(0.05)
            done = await connect(*args, **kwargs)
            connected.append(perf_counter())
            return done

        monkeypatch.setattr(loop, "sock_connect", slow_connect)
        client = RawClient(wire.url)
        result = await client.send(b"{}", timeout_s=5)
        client.close()
        return result

    r = asyncio.run(go())
    assert r.success and len(connected) == 1
    assert connected[0] <= r.sent_at_s < r.first_token_at_s


def test_a_stale_connection_is_retried_and_timed_from_the_retry():
    """The kept-alive connection is lost, without a byte, when the second request is written
    on it: the request goes out again on a new connection and is stamped sent at that write."""
    clock = ScriptedClock()
    first = sse_reply([(100.5, _sse("a", usage=(1, 1)))], 101.0)
    second = sse_reply([(102.0, _sse("b", usage=(1, 1)))], 102.5)
    wire = FakeWire(clock, [first, Reply([], "lose"), second], connect_s=0.25)
    r1, r2 = _run_scripted(wire, n=2)
    assert r1.success and r2.success
    t = 101.0 + LAG_S  # the clock when the first request ended
    assert wire.events[:5] == [("connect", 100.0, 1), ("write", 100.25, 1), ("write", t, 1),
                               ("connect", t, 2), ("write", t + 0.25, 2)]
    assert r2.sent_at_s == t + 0.25 and r2.ttft_s == 102.0 - (t + 0.25)
    assert wire.written[1] == wire.written[2]  # the same request, sent again


def test_a_read_keeps_its_kernel_stamp_however_late_the_loop_gets_to_it():
    """Each read is handed over half a scripted second after its kernel stamp: the chunk times
    are the kernel stamps; the end (no read carries it) is the clock's."""
    clock = ScriptedClock()
    a = _sse("a")[:-len(b"data: [DONE]\n\n")]
    wire = FakeWire(clock, [sse_reply([(100.25, a), (100.375, _sse("b", usage=(1, 2)))],
                                      100.5)], lag_s=0.5)
    (r,) = _run_scripted(wire)
    assert r.success and r.chunk_times_s == [100.25, 100.375] and r.itl_s == [0.125]
    assert r.end_at_s == 100.5 + 0.5


def test_closed_loop_run_opens_its_connections_before_the_clock_starts(wire, monkeypatch):
    """Connections that are slow to open: a run opens its four before its clock starts, so its
    first requests find them open (and it opens no more connections later)."""
    from runners.load import rawhttp
    from runners.load.generator import run_workload_sync
    from runners.load.process import LoadOptions
    from runners.load.workloads import build_schedule
    from tests.runners.loads import closed

    opened = rawhttp.open_stamped
    opens: list[float] = []  # perf_counter when each connection was open

    async def slow_open(*args, **kwargs):
        await asyncio.sleep(0.1)
        conn = await opened(*args, **kwargs)
        opens.append(perf_counter())
        return conn

    monkeypatch.setattr(rawhttp, "open_stamped", slow_open)
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", usage=(1, 1)))
    spec = closed(4, duration_s=0.3, input_tokens=8, output_tokens=1)
    out = run_workload_sync(build_schedule(spec), LoadOptions(
        url=wire.url, model="m", vocab_size=32000))
    assert out.results and all(r.success for r in out.results)
    assert len(opens) == 4 and wire.connections == 4  # none opened after the warm-up
    assert max(opens) <= out.started_at_s <= min(r.sent_at_s for r in out.results)


@pytest.fixture
def kernel_stamping() -> Iterator[None]:
    """Holds the kernel's receive stamping on for the test. Linux stamps packets only while
    some socket asks for it, and switches that on from a work queue a moment after the first
    one does; until then a read carries no stamp (and gets its read time). So: a loopback
    pair that asks, kept open, and a probe byte until one comes back stamped."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        writer = socket.create_connection(listener.getsockname())
        reader, _ = listener.accept()
        with writer, reader:
            reader.setsockopt(socket.SOL_SOCKET, stamped_socket._SO_TIMESTAMPNS, 1)
            while True:  # a condition, not a delay: the pytest timeout bounds it
                writer.send(b"x")
                _, ancillary, _, _ = reader.recvmsg(1, stamped_socket._ANC_SIZE)
                if ancillary:
                    break
            yield


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps: Linux only")
@pytest.mark.usefixtures("kernel_stamping")
def test_reads_carry_the_kernels_receive_time_not_the_loops(wire):
    """Token "b" reaches the socket while the client's loop is held (the server writes it only
    once the loop is stuck): the stamp recorded is its arrival, before the loop was released,
    not the loop's read after it; the gap recorded is the difference of the kernel stamps."""
    a_event = b"data: " + json.dumps({"choices": [{"index": 0, "text": "a"}]}).encode() + b"\n\n"
    rest = _chunked(_sse("b", usage=(1, 2)), size=4096)
    wire.response = HEAD_CHUNKED + b"%x\r\n%s\r\n" % (len(a_event), a_event) + rest
    wire.hold_last = len(rest)
    gate = wire.gate = threading.Event()
    reads: list[tuple[float, float, bytes]] = []  # (stamp, perf_counter when handed over, bytes)
    released: list[float] = []

    def on_read(stamp: float, data: bytes) -> None:
        reads.append((stamp, perf_counter(), data))
        if len(reads) == 1:  # "a" is in: the loop is stuck until the server has written "b"
            gate.set()
            assert wire.wrote_held.wait(10)
            released.append(perf_counter())

    async def go():
        client = RawClient(wire.url, connect=tapped(on_read))
        result = await client.send(b"{}", timeout_s=5)
        client.close()
        return result

    r = asyncio.run(go())
    assert r.success and len(reads) == 2
    (stamp_a, _, data_a), (stamp_b, read_b, data_b) = reads
    assert b'"a"' in data_a and b'"b"' in data_b
    assert r.chunk_times_s == [stamp_a, stamp_b]  # the client keeps the socket's stamps
    assert r.itl_s == [stamp_b - stamp_a]
    assert stamp_b < released[0] <= read_b  # arrived while the loop was stuck, read after
    assert r.end_at_s >= released[0]  # and parsed only then


def test_kernel_stamps_map_onto_perf_counter_and_never_after_their_read():
    """`_WallToPerf` on scripted readings: wall ns minus the measured offset; a stamp after its
    read or older than `_MAX_AGE_S` (a clock step) gives the read's own time."""
    mapping = stamped_socket._WallToPerf()
    offset = mapping.offset_ns = 1_700_000_000 * 10**9
    mapping.renew_at_s = math.inf
    assert mapping.perf_s(offset + 99_750_000_000, 100.0) == 99_750_000_000 * 1e-9
    assert mapping.perf_s(offset + 100_250_000_000, 100.0) == 100.0  # after its read
    assert mapping.perf_s(offset + 98_750_000_000, 100.0) == 100.0  # over a second old
    renewals: list[float] = []
    mapping._measure = lambda: renewals.append(mapping.renew_at_s)  # type: ignore[method-assign]
    mapping.renew_at_s = 100.0
    mapping.perf_s(offset + 99_750_000_000, 99.875)
    assert renewals == []  # not yet due
    mapping.perf_s(offset + 99_750_000_000, 100.0)
    assert renewals == [100.0]  # due at its deadline


@pytest.mark.skipif(stamped_socket._SO_TIMESTAMPNS is None, reason="no SO_TIMESTAMPNS here")
def test_a_read_takes_the_stamp_of_its_timestamp_message(monkeypatch):
    """`StampedSocket._stamp` on scripted ancillary data and a scripted read time: the kernel's
    timespec goes to the mapping; no (or a foreign or short) message gives the read's time."""
    seen: list[tuple[int, float]] = []

    class Mapping:
        def perf_s(self, wall_ns: int, now_s: float) -> float:
            seen.append((wall_ns, now_s))
            return 99.5

    monkeypatch.setattr(stamped_socket, "_CLOCK", Mapping())
    monkeypatch.setattr(stamped_socket, "perf_counter", lambda: 100.0)
    level, kind = socket.SOL_SOCKET, stamped_socket._SO_TIMESTAMPNS
    spec = stamped_socket._TIMESPEC.pack(1_700_000_000, 250)
    class Unused:  # `_stamp` reports to no receiver and needs no loop
        def __getattr__(self, name: str) -> None:
            raise AssertionError(name)

    a, b = socket.socketpair()
    with a, b:
        conn = StampedSocket(Unused(), a, Unused(), kernel_stamps=True)  # type: ignore[arg-type]
        assert conn._stamp([(level, kind, spec)]) == 99.5
        assert seen == [(1_700_000_000_000_000_250, 100.0)]
        assert conn._stamp([]) == 100.0
        assert conn._stamp([(level, kind + 1, spec), (level, kind, spec[:4])]) == 100.0
        assert len(seen) == 1
