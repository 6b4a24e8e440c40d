"""Prometheus text parsing, the engine-name → key mapping, and the interval scraper against a
local HTTP server whose counters move between scrapes."""

from __future__ import annotations

import asyncio
import http.server
import math
import threading
import time
from time import perf_counter
from typing import ClassVar

import numpy as np
import pytest
from aiohttp import web

from engines import get_engine
from runners.scrape import (
    ExpositionError,
    Scraper,
    extract,
    hit_rate,
    parse_exposition,
    spec_measured,
)

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


@pytest.fixture
def metrics_server():
    state = {"n": 0}

    async def handler(_request: web.Request) -> web.Response:
        state["n"] += 1
        n = state["n"]
        body = (f'vllm:num_requests_waiting{{model_name="m"}} {n}\n'
                f'vllm:prefix_cache_queries_total{{model_name="m"}} {100 * n}\n'
                f'vllm:prefix_cache_hits_total{{model_name="m"}} {60 * n}\n')
        return web.Response(text=body, content_type="text/plain")

    return handler, state


def test_scraper_interval_and_hit_rate(metrics_server):
    handler, state = metrics_server
    got = []

    async def main() -> tuple[float, float]:
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics", get_engine("vllm").metric_names,
                          sink=got.extend, interval_s=0.1)
        stop = asyncio.Event()
        before = perf_counter()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(0.45)
        stop.set()
        await task
        after = perf_counter()
        await runner.cleanup()
        assert scraper.failures == 0 and scraper.scrapes == state["n"]
        return before, after

    before, after = asyncio.run(main())
    waits = [s for s in got if s.key == "queue_depth"]
    assert 4 <= len(waits) == state["n"] <= 8
    assert [s.value for s in waits] == list(range(1, len(waits) + 1))
    assert all(before <= s.at_s <= after for s in got)  # the request stamps' clock
    assert hit_rate(got) == pytest.approx(0.6)


def test_scraper_counts_failures_without_raising():
    got = []

    async def main() -> Scraper:
        scraper = Scraper("http://127.0.0.1:9/metrics", get_engine("vllm").metric_names,
                          sink=got.extend, interval_s=0.05, timeout_s=1.0)
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(0.12)
        stop.set()
        await task
        return scraper

    scraper = asyncio.run(main())
    assert scraper.failures >= 2 and scraper.scrapes == 0 and got == []
    assert scraper.last_error


class _SlowMetrics(http.server.BaseHTTPRequestHandler):
    """/metrics that takes `delay_s` to answer and counts how many scrapes overlap."""

    delay_s = 0.25
    state: ClassVar[dict[str, int]] = {"active": 0, "max_active": 0, "n": 0}
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            self.state["active"] += 1
            self.state["n"] += 1
            self.state["max_active"] = max(self.state["max_active"], self.state["active"])
            n = self.state["n"]
        time.sleep(self.delay_s)
        body = f'vllm:num_requests_waiting{{model_name="m"}} {n}\n'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.lock:
            self.state["active"] -= 1

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def slow_metrics():
    _SlowMetrics.state = {"active": 0, "max_active": 0, "n": 0}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowMetrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", _SlowMetrics.state
    server.shutdown()
    server.server_close()


def test_slow_scrapes_do_not_pile_up(slow_metrics):
    """A reply slower than the period (0.25 s vs 0.05 s): one scrape at a time, back to back."""
    url, state = slow_metrics
    scraper = Scraper(url, get_engine("vllm").metric_names, sink=lambda _s: None,
                      interval_s=0.05)

    async def main() -> float:
        stop = asyncio.Event()
        t0 = perf_counter()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(1.0)
        stop.set()
        await task
        return perf_counter() - t0

    elapsed = asyncio.run(main())
    assert state["max_active"] == 1
    assert scraper.failures == 0
    # back to back: at most elapsed / delay scrapes (one more after the stop), never one per
    # period (20); fewer only when a loaded machine stretches the replies (seen once in the
    # fast suite on 2 cores)
    back_to_back = elapsed / _SlowMetrics.delay_s
    assert back_to_back / 2 <= scraper.scrapes <= back_to_back + 1.5


def test_scrapes_land_while_the_event_loop_is_busy(slow_metrics):
    """The load's loop blocked for 1 s (as when it parses thousands of streams): the scraper,
    on its own thread, still samples on time."""
    url, _state = slow_metrics
    _SlowMetrics.delay_s = 0.0
    got: list = []
    scraper = Scraper(url, get_engine("vllm").metric_names, sink=got.extend, interval_s=0.1)

    async def main() -> tuple[float, float]:
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        await asyncio.sleep(0)
        t0 = perf_counter()
        time.sleep(1.0)  # the loop does nothing else for a second
        t1 = perf_counter()
        stop.set()
        await task
        return t0, t1

    try:
        t0, t1 = asyncio.run(main())
    finally:
        _SlowMetrics.delay_s = 0.25
    during = [s for s in got if t0 <= s.at_s <= t1]
    assert len(during) >= 7  # ~10 at 0.1 s; the old on-loop scraper got none


def test_a_cancelled_scraper_takes_no_last_scrape_and_does_not_wait(slow_metrics):
    """A run that failed cancels its helpers: no last scrape of a failing server, and no wait
    for the reply in flight (here 0.25 s)."""
    url, state = slow_metrics
    scraper = Scraper(url, get_engine("vllm").metric_names, sink=lambda _s: None,
                      interval_s=10.0)

    async def main() -> float:
        task = asyncio.create_task(scraper.run(asyncio.Event()))
        await asyncio.sleep(0.1)  # the first scrape is in flight
        t0 = perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return perf_counter() - t0

    waited = asyncio.run(main())
    time.sleep(0.4)  # the scrape in flight ends; nothing follows it
    assert waited < 0.1 and state["n"] == 1


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
