"""The raw HTTP/1.1 transport on the wire: framing a real socket server writes byte by byte
(chunked, Content-Length, close-delimited, trailers), keep-alive reuse, a stale kept-alive
connection, a broken status line. (Stream semantics over both transports: test_client.py.)
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from runners.rawhttp import RawClient

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


class WireServer:
    """asyncio socket server in a thread: answers each request with `self.response` (raw
    bytes), written `step` bytes at a time; closes after it when `close_after`."""

    def __init__(self) -> None:
        self.response = b""
        self.step = 0
        self.close_after = False
        self.hold_last = 0  # write the response's last N bytes 50 ms after the rest
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
                    await asyncio.sleep(0.05)
                    writer.write(held)
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


HEAD_CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")


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
        await asyncio.sleep(0.1)  # the server has accepted them
        results = await asyncio.gather(*(client.send(b"{}", timeout_s=5) for _ in range(3)))
        client.close()
        return results

    results = asyncio.run(go())
    assert all(r.success for r in results)
    assert wire.events == ["conn"] * 3 + ["req"] * 3


def test_connection_setup_is_not_part_of_ttft(wire, monkeypatch):
    """A connection that takes 0.3 s to open: the request's clock starts at its write."""
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", usage=(1, 1)))
    setup_s = 0.3

    async def go():
        loop = asyncio.get_running_loop()
        connect = loop.sock_connect

        async def slow_connect(*args, **kwargs):
            await asyncio.sleep(setup_s)
            return await connect(*args, **kwargs)

        monkeypatch.setattr(loop, "sock_connect", slow_connect)
        client = RawClient(wire.url)
        began = time.perf_counter()
        result = await client.send(b"{}", timeout_s=5)
        client.close()
        return began, result

    began, r = asyncio.run(go())
    assert r.success
    assert r.sent_at_s - began >= setup_s
    assert r.ttft_s < setup_s / 3  # the stub answers at once; setup would be >= 0.3 s


def test_closed_loop_run_opens_its_connections_before_the_clock_starts(wire, monkeypatch):
    """Connections that take 0.2 s to open: a run opens its four before its clock starts, so
    its first requests still go out at once (and open no more connections later)."""
    from runners import rawhttp
    from runners.loadgen import LoadOptions, run_workload_sync
    from runners.workloads import WorkloadSpec, build_schedule

    opened = rawhttp.open_stamped

    async def slow_open(*args, **kwargs):
        await asyncio.sleep(0.2)
        return await opened(*args, **kwargs)

    monkeypatch.setattr(rawhttp, "open_stamped", slow_open)
    wire.response = HEAD_CHUNKED + _chunked(_sse("a", usage=(1, 1)))
    spec = WorkloadSpec(kind="concurrency", concurrency=4, duration_s=0.3, prompt_tokens=8,
                        output_tokens=1)
    out = run_workload_sync(build_schedule(spec), LoadOptions(
        url=wire.url, model="m", vocab_size=32000))
    assert out.results and all(r.success for r in out.results)
    first = sorted(r.sent_at_s - out.started_at_s for r in out.results)[:4]
    assert max(first) < 0.1  # not after a 0.2 s connection setup
    assert wire.connections == 4


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps: Linux only")
def test_reads_carry_the_kernels_receive_time_not_the_loops(wire):
    """The server sends token "b" 50 ms after "a" while the client's loop is blocked for
    0.3 s: the gap recorded is the 50 ms on the wire, not the time the loop got round to it."""
    a_event = b"data: " + json.dumps({"choices": [{"index": 0, "text": "a"}]}).encode() + b"\n\n"
    rest = _chunked(_sse("b", usage=(1, 2)), size=4096)
    wire.response = HEAD_CHUNKED + b"%x\r\n%s\r\n" % (len(a_event), a_event) + rest
    wire.hold_last = len(rest)  # written 50 ms after the rest

    async def go():
        client = RawClient(wire.url)
        await client.warm(1)
        loop = asyncio.get_running_loop()
        loop.call_later(0.025, time.sleep, 0.3)  # the loop is stuck while "b" arrives
        result = await client.send(b"{}", timeout_s=5)
        client.close()
        return result

    r = asyncio.run(go())
    assert r.success and len(r.chunk_times_s) == 2
    gap = r.chunk_times_s[1] - r.chunk_times_s[0]
    assert 0.04 <= gap < 0.15
    assert r.end_at_s - r.chunk_times_s[1] > 0.15  # it was parsed only after the block
