"""The request function, over both transports (`send` on aiohttp, and the raw HTTP/1.1 client).

Two halves, and no assertion reads a wall-clock budget:

* Timing semantics on a scripted clock: `FakeSession` (aiohttp) and `FakeWire` (raw, from
  test_rawhttp) hand over scripted reads at scripted instants and record what was asked when;
  the stamps are asserted exactly (TTFT at the first content chunk, ITL between content reads,
  the usage chunk does not extend E2E, a split event at the read that completes it…). Times
  are binary fractions, so differences of them are exact.
* Protocol against a real local aiohttp server that streams scripted SSE: the request body,
  the paths, token counts, and every failure kind as a row. Its writes are stamped on the
  client's clock, so what is asserted of time there is order (no stamp before its write).

How accurate the stamps are on a real clock is bench/client_timing.py's business.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from time import perf_counter

import aiohttp
import pytest
from aiohttp import web

from runners.load.client import build_payload, endpoint_url, send
from runners.load.rawhttp import RawClient
from runners.load.schemas import RequestResult, RequestSpec
from tests.runners.load.test_rawhttp import START_S, FakeWire, ScriptedClock, sse_reply

pytestmark = pytest.mark.timeout(60)


def _event(obj: dict | str) -> bytes:
    body = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {body}\n\n".encode()


def _text(t: str, finish: str | None = None) -> bytes:
    return _event({"choices": [{"index": 0, "text": t, "finish_reason": finish}]})


def _delta(d: dict, finish: str | None = None) -> bytes:
    return _event({"choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


def _usage(prompt: int, completion: int) -> bytes:
    return _event({"choices": [], "usage": {"prompt_tokens": prompt,
                                            "completion_tokens": completion}})


DONE = _event("[DONE]")
HOLD = math.inf  # a script delay that never ends: the server holds the stream open


@dataclass
class Script:
    """What the server answers: a status, and (delay_s, bytes) writes for a 200 stream."""

    steps: list[tuple[float, bytes]] = field(default_factory=list)
    status: int = 200
    body: bytes = b""


class ScriptedServer:
    """An aiohttp server in a thread; `script` answers the next requests; `writes` records
    (perf_counter just before each write, bytes) and `bodies` the JSON bodies received."""

    def __init__(self) -> None:
        self.script = Script()
        self.writes: list[tuple[float, bytes]] = []
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.paths.append(request.path)
        script, writes = self.script, self.writes  # this test's, however long it is held
        if script.status != 200:
            return web.Response(status=script.status, body=script.body,
                                content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for delay, data in script.steps:
            if delay == HOLD:
                await asyncio.Event().wait()  # until the server stops (cut off then)
            if delay:
                await asyncio.sleep(delay)
            writes.append((perf_counter(), data))  # before the write: causality holds
            await resp.write(data)
        await resp.write_eof()
        return resp

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        # A short shutdown: a handler still sleeping in a timeout test's script is cut off
        # instead of being waited for (up to 60 s by default) when the module's server stops.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._started.set()
        self._loop.run_forever()

    def start(self) -> ScriptedServer:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def stop(self) -> None:
        async def _cleanup() -> None:
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(_cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self, script: Script) -> None:
        self.script, self.writes, self.bodies, self.paths = script, [], [], []


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer().start()
    yield srv
    srv.stop()


TRANSPORT = {"name": "aiohttp"}


@pytest.fixture(autouse=True, params=["aiohttp", "raw"])
def transport(request) -> Iterator[str]:
    """Every test runs over both transports: `send` (aiohttp) and the load generator's raw
    HTTP/1.1 client, which must give the same results."""
    TRANSPORT["name"] = request.param
    yield request.param
    TRANSPORT["name"] = "aiohttp"


def _send(url: str, spec: RequestSpec, timeout_s: float = 10.0, n: int = 1) -> list[RequestResult]:
    async def go() -> list[RequestResult]:
        if TRANSPORT["name"] == "raw":
            raw = RawClient(endpoint_url(url, spec.api))
            body = json.dumps(build_payload(spec)).encode()
            try:
                return [await raw.send(body, timeout_s=timeout_s) for _ in range(n)]
            finally:
                raw.close()
        async with aiohttp.ClientSession() as session:
            return [await send(session, url, spec, timeout_s=timeout_s) for _ in range(n)]

    return asyncio.run(go())


COMPLETIONS = RequestSpec(model="m", prompt="hello", max_tokens=3)
CHAT = RequestSpec(model="m", prompt="hello", max_tokens=3, api="chat")


def _assert_invariants(r: RequestResult) -> None:
    assert r.success, r.error
    assert r.ttft_s is not None and r.e2e_s is not None
    # Exact on the stored stamps: differences of nearby floats are exact (Sterbenz).
    assert r.e2e_s - r.ttft_s == math.fsum(r.itl_s)
    assert len(r.itl_s) == len(r.chunk_times_s) - 1
    assert r.first_token_at_s == r.chunk_times_s[0]
    assert r.last_token_at_s == r.chunk_times_s[-1]
    assert r.sent_at_s < r.first_token_at_s <= r.last_token_at_s <= r.end_at_s


# --- timing semantics on a scripted clock -------------------------------------------------


@dataclass
class FakeReply:
    """A scripted response body: `reads`, (arrival, bytes) in order; the body ends at `end_s`
    (None: never); `fail`, if set, is raised by the body after its reads."""

    reads: list[tuple[float, bytes]] = field(default_factory=list)
    end_s: float | None = None
    fail: Exception | None = None


class FakeSession:
    """Stands in for `aiohttp.ClientSession` on a `ScriptedClock`: `post` records (clock,
    url, body) and answers 200 with the reply, whose body hands over each read with the clock
    moved to its arrival (aiohttp's stamp is the clock when a read is handed over) and then
    ends at `end_s`; `released` records the clock when the response was let go."""

    def __init__(self, clock: ScriptedClock, reply: FakeReply) -> None:
        self.clock, self.reply = clock, reply
        self.posts: list[tuple[float, str, bytes]] = []
        self.released: list[float] = []

    def post(self, url: str, *, data: bytes, headers: dict[str, str],
             allow_redirects: bool = True) -> FakeSession:
        assert allow_redirects is False  # a 3xx is the server's answer, never followed
        self.posts.append((self.clock.now_s, url, data))
        return self

    # The response: the session is its own (one request per session).
    status = 200
    reason = "OK"

    @property
    def content(self) -> FakeSession:
        return self

    async def __aenter__(self) -> FakeSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.released.append(self.clock.now_s)

    async def iter_any(self) -> AsyncIterator[bytes]:
        for at, data in self.reply.reads:
            await asyncio.sleep(0)  # a loop turn per read
            self.clock.now_s = at
            yield data
        if self.reply.fail is not None:
            raise self.reply.fail
        if self.reply.end_s is None:
            await asyncio.Event().wait()
        self.clock.now_s = self.reply.end_s


@dataclass
class Scripted:
    """A request run on a scripted transport: its result, the clock when the transport was
    asked to send (the POST, or the raw write), how long after its stamp a read reached the
    loop (the raw fake's lag; aiohttp stamps on handing over), and whether the stream was let
    go of before `send` returned (aiohttp: the response released; raw: the connection closed)."""

    result: RequestResult
    asked_at_s: float
    lag_s: float
    let_go: bool


def _scripted(reads: list[tuple[float, bytes]], end_s: float | None,
              spec: RequestSpec = COMPLETIONS, timeout_s: float = 10.0) -> Scripted:
    """`spec` sent over this test's transport, scripted: the clock starts at START_S."""
    clock = ScriptedClock()
    url = "http://127.0.0.1:9"  # never contacted

    async def go() -> Scripted:
        if TRANSPORT["name"] == "raw":
            wire = FakeWire(clock, [sse_reply(reads, end_s)])
            raw = RawClient(endpoint_url(url, spec.api), clock=clock, connect=wire)
            body = json.dumps(build_payload(spec)).encode()
            result = await raw.send(body, timeout_s=timeout_s)
            writes = [at for kind, at, _ in wire.events if kind == "write"]
            closed = any(kind == "close" for kind, _, _ in wire.events)
            raw.close()
            return Scripted(result, writes[0], wire.lag_s, closed)
        session = FakeSession(clock, FakeReply(reads, end_s))
        result = await send(session, url, spec, timeout_s=timeout_s,  # type: ignore[arg-type]
                            clock=clock)
        assert [(u, json.loads(b)) for _, u, b in session.posts] == [
            (endpoint_url(url, spec.api), build_payload(spec))]
        return Scripted(result, session.posts[0][0], 0.0, bool(session.released))

    return asyncio.run(go())


def test_completions_stamps_on_a_scripted_clock():
    """Content at +0.5, +0.75, +1.0 s, the usage chunk a second after the last one."""
    run = _scripted([(100.5, _text(" a")), (100.75, _text(" b")),
                     (101.0, _text(" c", "length")), (102.0, _usage(5, 3) + DONE)], 102.5)
    r = run.result
    _assert_invariants(r)
    assert r.sent_at_s == run.asked_at_s == START_S  # stamped when the request went out
    assert r.chunk_times_s == [100.5, 100.75, 101.0]  # each at its read's arrival
    assert (r.ttft_s, r.itl_s, r.e2e_s, r.tpot_s) == (0.5, [0.25, 0.25], 1.0, 0.25)
    assert r.last_token_at_s == 101.0  # the usage chunk does not extend E2E...
    assert r.end_at_s == 102.5 + run.lag_s  # ...but the request ends with the stream
    assert (r.prompt_tokens, r.output_tokens) == (5, 3) and r.chunk_tokens is None


def test_role_only_and_empty_chunks_are_not_content_on_a_scripted_clock():
    run = _scripted([(100.25, _delta({"role": "assistant", "content": ""})),
                     (100.5, _delta({"content": "Hi"})), (100.625, _delta({"content": " there"})),
                     (100.75, _delta({"content": ""}, "length")), (101.0, _usage(9, 3) + DONE)],
                    101.0, spec=CHAT)
    r = run.result
    _assert_invariants(r)
    assert r.chunk_times_s == [100.5, 100.625]  # not the role chunk, not the empty finish
    assert r.ttft_s == 0.5 and r.e2e_s == 0.625


def test_merged_and_split_reads_on_a_scripted_clock():
    """Two events in one read share its stamp; an event split over two reads is stamped at
    the read that completes it."""
    c = _text("c")
    run = _scripted([(100.5, _text("a") + _text("b")), (100.75, c[:7]), (101.0, c[7:]),
                     (101.25, _usage(1, 3) + DONE)], 101.25)
    r = run.result
    _assert_invariants(r)
    assert r.chunk_times_s == [100.5, 100.5, 101.0] and r.itl_s == [0.0, 0.5]


@pytest.mark.parametrize("reads", [
    [(100.5, DONE), (100.75, _text("a"))],  # [DONE] first, in reads of their own
    [(100.5, DONE + _text("a"))],  # in one read (the fast path)
    [(100.5, _text("a")), (100.625, b": ping\r\n\r\n" + DONE), (100.75, _text("b"))],
])
def test_data_after_done_is_a_malformed_stream_not_output(reads):
    """`data: [DONE]` ends the stream: a server that sends tokens after it must not have
    them counted (they were, and a [DONE]-first stream was stored complete)."""
    r = _scripted(reads, 101.0).result
    assert not r.success and r.error_kind == "malformed"
    assert "after data: [DONE]" in (r.error or "")


def test_timeout_keeps_the_stamps_and_lets_the_stream_go():
    """The body stops after one content chunk: the row is a timeout, with that chunk's stamp,
    ended at the clock's reading then, and the stream is dropped (not read on)."""
    run = _scripted([(100.5, _text("a"))], None, timeout_s=0.05)
    r = run.result
    assert not r.success and r.error_kind == "timeout" and "0.05 s" in r.error
    assert r.chunk_times_s == [100.5] and r.ttft_s == 0.5
    assert r.end_at_s == 100.5 + run.lag_s and run.let_go


@pytest.mark.parametrize("transport", ["aiohttp"], indirect=True)
@pytest.mark.parametrize(("fail", "kind"), [
    (aiohttp.ClientPayloadError("Response payload is not completed"), "connection"),
    (RuntimeError("surprise"), "client"),
])
def test_a_body_that_raises_is_a_row_with_its_stamps(fail, kind):
    clock = ScriptedClock()
    session = FakeSession(clock, FakeReply([(100.5, _text("a"))], fail=fail))
    r = asyncio.run(send(session, "http://h:1", COMPLETIONS, timeout_s=10,  # type: ignore[arg-type]
                         clock=clock))
    assert not r.success and r.error_kind == kind and type(fail).__name__ in r.error
    assert (r.sent_at_s, r.chunk_times_s, r.end_at_s) == (START_S, [100.5], 100.5)
    assert session.released == [100.5]


# --- protocol against a real local server --------------------------------------------------


def test_completions_stream_over_a_real_server(server):
    server.reset(Script([
        (0, _text(" a")), (0, _text(" b")), (0, _text(" c", "length")),
        (0, _usage(5, 3)), (0, DONE),
    ]))
    (r,) = _send(server.url, COMPLETIONS)
    _assert_invariants(r)
    content_writes = [t for t, _ in server.writes[:3]]
    assert len(r.chunk_times_s) == 3
    # Order only (the exact stamps: test_completions_stamps_on_a_scripted_clock): sent before
    # the server answered, each chunk stamped no earlier than its write began, ended after
    # the last write.
    assert r.sent_at_s < content_writes[0]
    assert all(got >= wrote for got, wrote in zip(r.chunk_times_s, content_writes, strict=True))
    assert r.end_at_s >= server.writes[-1][0]
    assert (r.prompt_tokens, r.output_tokens) == (5, 3)
    assert r.tpot_s * 2 == pytest.approx(r.e2e_s - r.ttft_s)
    assert r.chunk_tokens is None  # the server did not report per-chunk counts
    assert server.paths == ["/v1/completions"]


def test_request_body_forces_streaming_usage_and_length(server):
    server.reset(Script([(0, _text("x")), (0, _usage(1, 1)), (0, DONE)]))
    spec = RequestSpec(model="m", prompt=[1, 2, 3], max_tokens=7,
                       extra_body={"temperature": 0.0})
    (r,) = _send(server.url + "/v1", spec)
    assert r.success
    assert server.bodies == [{
        "model": "m", "prompt": [1, 2, 3], "temperature": 0.0, "max_tokens": 7,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }]
    assert r.tpot_s is None  # one token: TPOT undefined


def test_chat_role_only_and_empty_chunks_are_not_content(server):
    server.reset(Script([
        (0, _delta({"role": "assistant", "content": ""})),
        (0.01, _delta({"content": "Hi"})), (0, _delta({"content": " there"})),
        (0, _delta({"content": ""}, "length")), (0, _usage(9, 3)), (0, DONE),
    ]))
    (r,) = _send(server.url, CHAT)
    _assert_invariants(r)
    assert server.paths == ["/v1/chat/completions"]
    assert server.bodies[0]["messages"] == [{"role": "user", "content": "hello"}]
    assert len(r.chunk_times_s) == 2  # neither the role chunk nor the empty finish chunk
    assert r.first_token_at_s >= server.writes[1][0]  # stamped at "Hi", not the role chunk
    assert r.output_tokens == 3


def test_merged_and_split_writes(server):
    two = _text("a") + _text("b")
    split = _text("c")
    server.reset(Script([(0.01, two), (0.01, split[:7]), (0.01, split[7:]),
                         (0, _usage(1, 3) + DONE)]))
    (r,) = _send(server.url, COMPLETIONS)
    _assert_invariants(r)
    assert len(r.chunk_times_s) == 3
    assert r.itl_s[0] == 0.0  # two events in one read share one arrival stamp
    assert r.chunk_times_s[2] >= server.writes[2][0]  # stamped when the event completed


def test_per_chunk_token_counts_from_continuous_usage(server):
    def chunk(t: str, total: int) -> bytes:
        return _event({"choices": [{"index": 0, "text": t}],
                       "usage": {"prompt_tokens": 4, "completion_tokens": total}})

    server.reset(Script([(0, chunk("ab", 2)), (0, chunk("c", 3)), (0, _usage(4, 3)),
                         (0, DONE)]))
    (r,) = _send(server.url, COMPLETIONS)
    assert r.success and r.chunk_tokens == [2, 1] and r.output_tokens == 3


def test_missing_usage_is_recorded_not_guessed(server):
    server.reset(Script([(0, _text("a")), (0, _text("b")), (0, DONE)]))
    (r,) = _send(server.url, COMPLETIONS)
    assert r.success
    assert r.output_tokens is None and r.prompt_tokens is None and r.tpot_s is None


def test_http_500_is_a_failure_row(server):
    body = json.dumps({"error": {"message": "model exploded", "code": 500}}).encode()
    server.reset(Script(status=500, body=body))
    (r,) = _send(server.url, COMPLETIONS)
    assert not r.success
    assert (r.error_kind, r.http_status) == ("http", 500)
    assert r.error == "HTTP 500 Internal Server Error: 500: model exploded"
    assert r.ttft_s is None and r.e2e_s is None and r.itl_s == []


def test_timeout_is_a_failure_row(server):
    """The server holds the stream before any content: only the timeout can end it."""
    server.reset(Script([(HOLD, _text("late")), (0, DONE)]))
    (r,) = _send(server.url, COMPLETIONS, timeout_s=0.1)
    assert not r.success and r.error_kind == "timeout" and "0.1 s" in r.error
    assert r.first_token_at_s is None and server.writes == []  # the answer never came


def test_timeout_mid_stream_keeps_the_stamps(server):
    # 1 s: "a" must arrive before it on however busy a machine; that its stamp is kept, and
    # exactly, is test_timeout_keeps_the_stamps_and_lets_the_stream_go's.
    server.reset(Script([(0, _text("a")), (HOLD, _text("b")), (0, DONE)]))
    (r,) = _send(server.url, COMPLETIONS, timeout_s=1.0)
    assert not r.success and r.error_kind == "timeout"
    assert len(r.chunk_times_s) == 1 and r.ttft_s is not None


def test_error_event_in_a_200_stream_is_a_failure(server):
    err = {"error": {"message": "EngineCore encountered an issue.", "code": 500}}
    server.reset(Script([(0, _text("a")), (0, _event(err)), (0, DONE)]))
    (r,) = _send(server.url, COMPLETIONS)
    assert not r.success
    assert (r.error_kind, r.http_status) == ("stream_error", 200)
    assert r.error == "500: EngineCore encountered an issue."


def test_stream_without_content_is_a_failure(server):
    server.reset(Script([(0, _delta({"role": "assistant", "content": ""})),
                         (0, _usage(3, 0)), (0, DONE)]))
    (r,) = _send(server.url, CHAT)
    assert not r.success and r.error_kind == "no_content"
    assert r.prompt_tokens == 3 and r.first_token_at_s is None


def test_malformed_json_is_a_failure(server):
    server.reset(Script([(0, _text("a")), (0, b"data: {oops\n\n"), (0, DONE)]))
    (r,) = _send(server.url, COMPLETIONS)
    assert not r.success and r.error_kind == "malformed" and "bad JSON" in r.error
    assert "\n" not in r.error


def test_connection_refused_is_a_failure_row():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens
    (r,) = _send(f"http://127.0.0.1:{port}", COMPLETIONS, timeout_s=5)
    assert not r.success and r.error_kind == "connection" and r.http_status is None


def test_no_stamp_precedes_its_write(server):
    """20 requests: the client's stamp of each first content chunk is no earlier than the
    server's stamp just before writing it (order on one clock; how much later is the bench's:
    bench/client_timing.py)."""
    server.reset(Script([(0.002, _text("a")), (0.002, _text("b")), (0, _usage(1, 2)),
                         (0, DONE)]))
    results = _send(server.url, COMPLETIONS, n=20)
    firsts = [t for t, data in server.writes if data == _text("a")]
    assert all(r.success for r in results) and len(firsts) == 20
    assert all(r.first_token_at_s >= w for r, w in zip(results, firsts, strict=True))


def test_spec_validation():
    with pytest.raises(ValueError, match="token-id prompts"):
        RequestSpec(model="m", prompt=[1], max_tokens=1, api="chat")
    with pytest.raises(ValueError, match="extra_body may not set"):
        RequestSpec(model="m", prompt="x", max_tokens=1, extra_body={"stream": False})
    with pytest.raises(ValueError):
        RequestSpec(model="m", prompt="x", max_tokens=0)
    with pytest.raises(ValueError):
        RequestSpec(model="m", prompt="x", max_tokens=1, nonsense=1)


def test_endpoint_url_and_payload():
    assert endpoint_url("http://h:1", "chat") == "http://h:1/v1/chat/completions"
    assert endpoint_url("http://h:1/v1/", "completions") == "http://h:1/v1/completions"
    assert endpoint_url("http://h:1/x/v1/completions", "chat") == "http://h:1/x/v1/completions"
    assert build_payload(CHAT)["messages"][0]["content"] == "hello"


def test_result_round_trips_through_json():
    r = RequestResult(success=True, sent_at_s=1.0, first_token_at_s=1.5, last_token_at_s=2.0,
                      end_at_s=2.1, chunk_times_s=[1.5, 1.75, 2.0], output_tokens=3)
    again = RequestResult.model_validate_json(r.model_dump_json())
    assert again == r and again.tpot_s == 0.25 and again.itl_s == [0.25, 0.25]
