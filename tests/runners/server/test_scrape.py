"""Prometheus text parsing, the engine-name → key mapping, and the interval scraper against a
local HTTP server whose counters move between scrapes."""

from __future__ import annotations

import asyncio
import http.server
import math
import threading
from time import perf_counter

import numpy as np
import pytest
from aiohttp import web

from engines.registry import get_engine
from runners.server.engine_metrics import extract, hit_rate, spec_measured
from runners.server.exposition import ExpositionError, parse_exposition
from runners.server.scrape import Scraper

# The shape of vLLM 0.1x /metrics (v1 engine): HELP/TYPE comments, model_name/engine labels,
# counters with _total and _created, a histogram.
VLLM_TEXT = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 8751.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 5.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 4096.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.7e+09
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1024.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 3.5
"""


def test_parse_labels_values_and_comments():
    samples = parse_exposition(VLLM_TEXT + 'odd{a="q\\"uo\\\\te\\n",b="x"} NaN 1700000000000\n'
                               "neg -Inf\n")
    by = {(s.name, s.labels.get("le")): s for s in samples}
    assert len(samples) == 13
    assert by[("vllm:num_requests_waiting", None)].labels == {"engine": "0", "model_name": "tiny"}
    assert by[("vllm:time_to_first_token_seconds_bucket", "+Inf")].value == 12.0
    odd = by[("odd", None)]
    assert odd.labels == {"a": 'q"uo\\te\n', "b": "x"} and math.isnan(odd.value)
    assert odd.timestamp_ms == 1700000000000
    assert by[("neg", None)].value == -math.inf


def test_parse_error_names_the_line():
    with pytest.raises(ExpositionError, match="line 2"):
        parse_exposition("ok 1\nbroken{a=1} 2\n")


def test_extract_with_the_vllm_plugin_names():
    names = get_engine("vllm").metric_names
    got = {s.key: s.value for s in extract(parse_exposition(VLLM_TEXT), names, 1.0)}
    assert got["queue_depth"] == 5 and got["running"] == 2 and got["kv_cache_usage"] == 0.25
    assert got["prefix_cache_queries_tokens"] == 4096 and got["prefix_cache_hits_tokens"] == 1024
    assert got["ttft_seconds_sum"] == 3.5 and got["ttft_seconds_count"] == 12


def test_extract_older_name_and_label_sum():
    text = ('vllm:gpu_cache_usage_perc{engine="0"} 0.2\nvllm:gpu_cache_usage_perc{engine="1"} 0.4\n'
            'vllm:num_requests_waiting{engine="0"} 3\nvllm:num_requests_waiting{engine="1"} 4\n')
    got = {s.key: s for s in extract(parse_exposition(text), get_engine("vllm").metric_names, 0)}
    assert got["kv_cache_usage"].name == "vllm:gpu_cache_usage_perc"
    assert got["kv_cache_usage"].value == pytest.approx(0.3)  # a ratio: averaged
    assert got["queue_depth"].value == 7  # a count: summed over engines


class ScriptedPacer:
    """Virtual time for the scraper: `wait` jumps to its deadline, and at `stop_at_s` sets the
    stop (and the last-scrape) events as `Scraper.run` would; `fetch` is a /metrics reply that
    takes `reply_s` and records when it was asked (start, end)."""

    def __init__(self, reply_s: float, stop_at_s: float) -> None:
        self.t = 0.0
        self.reply_s, self.stop_at_s = reply_s, stop_at_s
        self.fetches: list[tuple[float, float]] = []
        self.waits: list[float] = []
        self.last = threading.Event()

    def now(self) -> float:
        return self.t

    def wait(self, stop: threading.Event, timeout_s: float) -> None:
        self.waits.append(timeout_s)
        self.t += timeout_s
        if self.t >= self.stop_at_s:
            self.last.set()
            stop.set()

    def fetch(self) -> tuple[str, float]:
        start = self.t
        self.t += self.reply_s
        self.fetches.append((start, self.t))
        n = len(self.fetches)
        return (f'vllm:num_requests_waiting{{model_name="m"}} {n}\n'
                f'vllm:prefix_cache_queries_total{{model_name="m"}} {100 * n}\n'
                f'vllm:prefix_cache_hits_total{{model_name="m"}} {60 * n}\n'), self.t


def _scripted(reply_s: float, interval_s: float, stop_at_s: float
              ) -> tuple[Scraper, ScriptedPacer, list]:
    got: list = []
    pacer = ScriptedPacer(reply_s, stop_at_s)
    scraper = Scraper("http://127.0.0.1:9/metrics", get_engine("vllm").metric_names,
                      sink=got.extend, interval_s=interval_s, pacer=pacer, fetch=pacer.fetch)
    scraper.scrape_until(threading.Event(), pacer.last)
    return scraper, pacer, got


def test_scrapes_keep_their_period_and_take_one_last_after_the_stop():
    # Replies of 10 ms, a 100 ms period, stopped at 0.45 s: scrapes start at 0, 0.1, ..., 0.4;
    # the wait after the 0.4 one ends at 0.5, past the stop, and the last scrape starts there.
    scraper, pacer, got = _scripted(reply_s=0.01, interval_s=0.1, stop_at_s=0.45)
    starts = [start for start, _end in pacer.fetches]
    assert starts == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert pacer.waits == pytest.approx([0.09] * 5)
    waits = [s for s in got if s.key == "queue_depth"]
    assert [s.value for s in waits] == [1, 2, 3, 4, 5, 6] and scraper.scrapes == 6
    # each sample carries the time its reply began, on the pacer's clock
    assert [s.at_s for s in waits] == pytest.approx([end for _start, end in pacer.fetches])
    assert hit_rate(got) == pytest.approx(0.6)
    assert scraper.failures == 0


def test_slow_scrapes_do_not_pile_up():
    """A reply slower than the period (0.25 s vs 0.05 s): one scrape at a time, back to back,
    never one per period (20 in a second)."""
    scraper, pacer, _got = _scripted(reply_s=0.25, interval_s=0.05, stop_at_s=1.0)
    assert pacer.fetches == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0), (1.0, 1.25)]
    assert all(w == 0.0 for w in pacer.waits)  # no wait: the next starts as one ends
    assert scraper.scrapes == 5


def test_no_last_scrape_without_the_last_flag():
    """Cancelled runs set the stop but not `last`: the loop ends without another scrape."""
    got: list = []
    pacer = ScriptedPacer(reply_s=0.01, stop_at_s=0.25)
    scraper = Scraper("http://127.0.0.1:9/metrics", get_engine("vllm").metric_names,
                      sink=got.extend, interval_s=0.1, pacer=pacer, fetch=pacer.fetch)
    scraper.scrape_until(threading.Event(), threading.Event())  # `last` never set
    assert [round(start, 9) for start, _end in pacer.fetches] == [0.0, 0.1, 0.2]


def test_failures_are_counted_never_raised():
    def refused() -> tuple[str, float]:
        raise ConnectionRefusedError(111, "Connection refused")

    got: list = []
    pacer = ScriptedPacer(reply_s=0.0, stop_at_s=0.35)
    scraper = Scraper("http://127.0.0.1:9/metrics", get_engine("vllm").metric_names,
                      sink=got.extend, interval_s=0.1, pacer=pacer, fetch=refused)
    scraper.scrape_until(threading.Event(), pacer.last)
    assert scraper.failures == 5 and scraper.scrapes == 0 and got == []  # 0 .. 0.3, and last
    assert scraper.last_error is not None and "ConnectionRefusedError" in scraper.last_error


def test_the_real_transport_counts_a_refused_connection():
    # Port 9 (discard) is closed on loopback: each scrape fails at once with a clear reason.
    scraper = Scraper("http://127.0.0.1:9/metrics", get_engine("vllm").metric_names,
                      sink=lambda _s: None, timeout_s=5.0)
    assert scraper.scrape_once() == [] and scraper.scrape_once() == []
    assert scraper.failures == 2 and scraper.scrapes == 0
    assert scraper.last_error is not None and "Connection" in scraper.last_error


def test_scraper_reads_a_real_server_until_stopped():
    """A real aiohttp /metrics whose counters move: consecutive values, one sample set per
    scrape, stamped on the request stamps' clock, hit rate from the token counters."""
    state = {"n": 0}
    got: list = []

    async def handler(_request: web.Request) -> web.Response:
        state["n"] += 1
        n = state["n"]
        body = (f'vllm:num_requests_waiting{{model_name="m"}} {n}\n'
                f'vllm:prefix_cache_queries_total{{model_name="m"}} {100 * n}\n'
                f'vllm:prefix_cache_hits_total{{model_name="m"}} {60 * n}\n')
        return web.Response(text=body, content_type="text/plain")

    async def main() -> tuple[float, float, Scraper]:
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        loop, stop = asyncio.get_running_loop(), asyncio.Event()

        def sink(samples: list) -> None:
            got.extend(samples)
            if sum(s.key == "queue_depth" for s in got) >= 4:
                loop.call_soon_threadsafe(stop.set)

        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", get_engine("vllm").metric_names,
                          sink=sink, interval_s=0.02)
        before = perf_counter()
        await scraper.run(stop)
        after = perf_counter()
        await runner.cleanup()
        return before, after, scraper

    before, after, scraper = asyncio.run(main())
    waits = [s for s in got if s.key == "queue_depth"]
    assert len(waits) >= 5  # four, then the last one after the stop
    assert [s.value for s in waits] == list(range(1, len(waits) + 1))
    assert scraper.failures == 0 and scraper.scrapes == state["n"] == len(waits)
    assert all(before <= s.at_s <= after for s in got)  # the request stamps' clock
    assert hit_rate(got) == pytest.approx(0.6)


def _gated_server(gate: threading.Event | None) -> tuple[http.server.ThreadingHTTPServer, dict]:
    """A /metrics server (its own handler class: nothing shared between tests) that answers
    each GET once `gate` is set (at once without a gate) and records each GET as it arrives."""
    state: dict = {"n": 0, "entered": threading.Event()}
    lock = threading.Lock()

    class Handler(_Quiet):
        def do_GET(self) -> None:
            with lock:
                state["n"] += 1
                n = state["n"]
            state["entered"].set()
            if gate is not None:
                gate.wait(30)
            _answer(self, n)

    return _serve(Handler), state


class _Quiet(http.server.BaseHTTPRequestHandler):
    """A handler that logs nothing (each test server subclasses it)."""

    def log_message(self, *_args: object) -> None:
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    """A threading server of `handler` on a free loopback port, serving in a daemon thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _answer(handler: http.server.BaseHTTPRequestHandler, n: int) -> None:
    """Reply 200 with a one-sample exposition whose value is `n` (Content-Length framed)."""
    body = f'vllm:num_requests_waiting{{model_name="m"}} {n}\n'.encode()
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _url(server: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/metrics"


def _closing_server(answered: int | None) -> tuple[http.server.ThreadingHTTPServer, dict]:
    """A /metrics server that answers the first GET of each of its first `answered` connections
    (all of them with None), HTTP/1.1 with a Content-Length and no `Connection: close`, then
    closes the socket, as uvicorn does to an idle keep-alive connection; later connections it
    closes unanswered. It counts connections and replies; both are final once a scrape returns,
    as the scraper sees each close only after the handler is done."""
    state: dict = {"connections": 0, "replies": 0}
    lock = threading.Lock()

    class Handler(_Quiet):
        protocol_version = "HTTP/1.1"

        def handle(self) -> None:  # one request at most, then the server closes the socket
            with lock:
                state["connections"] += 1
                answer = answered is None or state["connections"] <= answered
            if answer:
                self.handle_one_request()

        def do_GET(self) -> None:
            with lock:
                state["replies"] += 1
                n = state["replies"]
            _answer(self, n)

    return _serve(Handler), state


def test_a_keep_alive_connection_the_server_closed_is_retried_on_a_fresh_one():
    """The stale keep-alive race (CI: `RemoteDisconnected` on a scrape of vLLM): the kept
    connection was closed by the server after its reply; the next scrape opens a fresh one
    and succeeds, one connection per scrape."""
    server, state = _closing_server(None)
    scraper = Scraper(_url(server), get_engine("vllm").metric_names, sink=lambda _s: None)
    try:
        got = [scraper.scrape_once() for _ in range(4)]
        assert [[s.value for s in scrape if s.key == "queue_depth"] for scrape in got] == [
            [1], [2], [3], [4]]
        assert scraper.scrapes == 4 and scraper.failures == 0 and scraper.last_error is None
        assert state["connections"] == 4 and state["replies"] == 4
    finally:
        scraper._close()
        server.shutdown()
        server.server_close()


def test_the_retry_is_once_and_only_on_a_reused_connection():
    """After one reply the server closes every connection unanswered: each scrape still fails
    and is counted. The one on the reused connection retries once (one new connection after
    the stale one); the later ones, on a fresh connection, are not retried (one each)."""
    server, state = _closing_server(1)
    scraper = Scraper(_url(server), get_engine("vllm").metric_names, sink=lambda _s: None)
    try:
        assert scraper.scrape_once() != [] and state["connections"] == 1
        seen = []
        for _ in range(3):
            assert scraper.scrape_once() == []
            seen.append(state["connections"])
        assert seen == [2, 3, 4]  # no retry: [1, 2, 3]; retrying fresh ones too: [2, 4, 6]
        assert scraper.scrapes == 1 and scraper.failures == 3 and state["replies"] == 1
        assert scraper.last_error is not None
    finally:
        scraper._close()
        server.shutdown()
        server.server_close()


def test_scrapes_land_while_the_event_loop_is_busy():
    """The load's loop blocked (as when it parses thousands of streams): the scraper, on its
    own thread, keeps sampling; the old on-loop scraper took none until the loop was free."""
    server, _state = _gated_server(None)
    three = threading.Event()
    got: list = []

    def sink(samples: list) -> None:
        got.extend(samples)
        if len(got) >= 3:
            three.set()

    scraper = Scraper(_url(server), get_engine("vllm").metric_names, sink=sink, interval_s=0.01)

    async def main() -> bool:
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(0)  # the scraper's thread starts
        landed = three.wait(60)  # blocks the loop: nothing on it runs meanwhile
        stop.set()
        await task
        return landed

    try:
        assert asyncio.run(main())
    finally:
        server.shutdown()
        server.server_close()


def test_a_cancelled_scraper_takes_no_last_scrape_and_does_not_wait():
    """A run that failed cancels its helpers: the cancel returns while the reply in flight is
    still held by the server, and no scrape follows it once the server answers."""
    gate = threading.Event()
    server, state = _gated_server(gate)
    scraper = Scraper(_url(server), get_engine("vllm").metric_names, sink=lambda _s: None,
                      interval_s=0.01)

    async def main() -> bool:
        task = asyncio.create_task(scraper.run(asyncio.Event()))
        assert await asyncio.to_thread(state["entered"].wait, 30)  # first scrape in flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return gate.is_set()

    try:
        assert asyncio.run(main()) is False  # returned without the reply
        gate.set()
        for thread in threading.enumerate():
            if thread.name == "scraper":
                thread.join(30)
        assert state["n"] == 1 and scraper.scrapes == 1
    finally:
        gate.set()
        server.shutdown()
        server.server_close()


def _spec_text(drafts: float, drafted: float, accepted: float) -> str:
    """vLLM's speculative counters (v1 engine names), two engine cores."""
    return "".join(
        f'vllm:spec_decode_num_drafts_total{{engine="{e}",model_name="m"}} {drafts / 2}\n'
        f'vllm:spec_decode_num_draft_tokens_total{{engine="{e}",model_name="m"}} {drafted / 2}\n'
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="{e}",model_name="m"}} '
        f"{accepted / 2}\n" for e in (0, 1))


def test_speculation_from_vllm_counters_over_the_run():
    # Between the first and last scrape: 400 drafting steps of k = 3 (1,200 draft tokens),
    # 520 accepted: 1 + 520 / 400 = 2.3 tokens per step. The per-token rate a solves
    # 1 + a + a^2 + a^3 = 2.3 (numpy's roots here, not the code's bisection).
    names = get_engine("vllm").metric_names
    samples = [*extract(parse_exposition(_spec_text(100, 300, 90)), names, 1.0),
               *extract(parse_exposition(_spec_text(300, 900, 400)), names, 2.0),
               *extract(parse_exposition(_spec_text(500, 1500, 610)), names, 3.0)]
    got = spec_measured(samples)
    assert got is not None and got.draft_tokens == 3
    assert got.tokens_per_step == pytest.approx(2.3)
    roots = np.roots([1, 1, 1, 1 - 2.3])
    a = next(r.real for r in roots if abs(r.imag) < 1e-12 and 0 < r.real < 1)
    assert got.acceptance == pytest.approx(a, abs=1e-6)


def test_speculation_from_an_accept_length_gauge_and_none_without_counts():
    names = get_engine("sglang").metric_names
    scrapes = [extract(parse_exposition(f'sglang:spec_accept_length{{model_name="m"}} {v}\n'),
                       names, at_s) for at_s, v in ((1.0, 2.0), (2.0, 3.0))]
    samples = [s for scrape in scrapes for s in scrape]
    got = spec_measured(samples)
    assert got is not None and got.tokens_per_step == pytest.approx(2.5)
    assert got.draft_tokens is None and got.acceptance is None  # k unknown: no rate
    plain = extract(parse_exposition(VLLM_TEXT), get_engine("vllm").metric_names, 1.0)
    assert spec_measured(plain) is None
