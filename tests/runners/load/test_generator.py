"""The load generator against a real local streaming server (tests/runners/loadgen_server.py)
that records what each request carried and how many were in flight: every scheduled request
sent and answered, concurrency caps, stop semantics over real sockets, callbacks, worker
processes, text prompts over chat, the sync entry point; slow tests against real vLLM.

No test here asserts a time: when requests go out (at their offsets, never early, phases, the
duration, stops) is tested on virtual time in test_loadgen_timing.py, and how late they are on
a real clock is measured by bench/loadgen_lag.py. Stops here are triggered by what the server
saw, not by timers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from core.loop import run_outside_loop
from runners.load.generator import run_workload, run_workload_sync
from runners.load.process import LoadOptions
from runners.load.workloads import build_schedule
from tests.runners.load.test_prompts import _tokenizer
from tests.runners.loadgen_server import LoadServer
from tests.runners.loads import closed, poisson

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server() -> Iterator[LoadServer]:
    srv = LoadServer().start()
    yield srv
    srv.stop()


def _options(srv: LoadServer, **kw) -> LoadOptions:
    return LoadOptions(url=srv.url, vocab_size=32000, **kw)


def _once(condition: Callable[[], bool], action: Callable[[], None]) -> None:
    """Call `action` from a thread as soon as `condition` holds (polled every 5 ms)."""
    def watch() -> None:
        while not condition():
            time.sleep(0.005)
        action()

    threading.Thread(target=watch, daemon=True).start()


def test_open_loop_sends_every_request_over_real_sockets(server):
    spec = poisson(600.0, num_requests=300, input_tokens=32, output_tokens=3, seed=4)
    out = run_workload_sync(build_schedule(spec), _options(server))
    assert out.sent == 300 and out.unsent == 0 and not out.interrupted
    assert out.indices == list(range(300)) and len(server.received) == 300
    assert all(r.success for r in out.results)
    assert {(r.prompt_tokens, r.output_tokens) for r in out.results} == {(32, 3)}
    assert all(out.started_at_s <= r.sent_at_s <= r.end_at_s <= out.ended_at_s
               for r in out.results)  # one clock for the run and its stamps


def test_closed_loop_keeps_exactly_the_concurrency(server):
    server.itl_s = 0.002
    spec = closed(8, num_requests=120, input_tokens=16, output_tokens=5)
    seen: list[int] = []
    out = run_workload_sync(build_schedule(spec), _options(server),
                            on_result=lambda i, r: seen.append(i))
    assert server.max_inflight == 8
    assert out.sent == 120 and sorted(seen) == list(range(120)) and len(seen) == 120
    assert all(r.success and r.output_tokens == 5 and r.prompt_tokens == 16
               for r in out.results)
    prompts = [tuple(b["prompt"][:16]) for _, b in server.received]
    assert len(set(prompts)) == 120  # no accidental prefix reuse between requests


def test_open_loop_concurrency_cap(server):
    server.itl_s = 0.004
    spec = poisson(2000.0, num_requests=80, max_in_flight=5, input_tokens=8, output_tokens=4)
    out = run_workload_sync(build_schedule(spec), _options(server))
    assert server.max_inflight == 5 and out.sent == 80
    assert all(r.success for r in out.results)


def test_stop_keeps_finished_and_cancels_in_flight(server):
    server.itl_s = 0.05  # 10 tokens: about half a second per request
    spec = closed(4, duration_s=60.0, input_tokens=8, output_tokens=10)
    calls: list[int] = []

    async def go():
        stop = asyncio.Event()

        async def second_wave_arrived() -> None:  # the first 4 done, their successors in flight
            while not (len(server.received) >= 8 and server.inflight == 4):
                await asyncio.sleep(0.005)
            stop.set()

        watcher = asyncio.create_task(second_wave_arrived())
        try:
            return await run_workload(build_schedule(spec), _options(server), stop=stop,
                                      on_result=lambda i, r: calls.append(i))
        finally:
            watcher.cancel()

    out = asyncio.run(go())
    assert out.interrupted and out.sent == len(out.results) == len(calls) == 8
    cancelled = [r for r in out.results if not r.success]
    assert len(cancelled) == 4  # exactly the requests in flight at the stop
    assert {r.error_kind for r in cancelled} == {"cancelled"}
    done = [r for r in out.results if r.success]
    assert len(done) == 4 and all(r.output_tokens == 10 for r in done)
    assert out.indices == list(range(out.sent)) and len(server.received) == 8


def test_thread_stop_in_open_loop_counts_unsent(server):
    spec = poisson(20.0, num_requests=2000, input_tokens=8, output_tokens=2)
    stop = threading.Event()
    out = run_workload_sync(build_schedule(spec), _options(server), stop=stop,
                            on_result=lambda i, r: stop.set() if i >= 2 else None)
    assert out.interrupted and 3 <= out.sent < 2000 and out.unsent == 2000 - out.sent
    assert out.indices == list(range(out.sent))


def test_callback_error_stops_and_is_raised(server):
    spec = closed(2, num_requests=50, input_tokens=8, output_tokens=2)

    def boom(i, r):
        raise ValueError("store is full")

    with pytest.raises(ValueError, match="store is full"):
        run_workload_sync(build_schedule(spec), _options(server), on_result=boom)
    assert len(server.received) < 50


def test_sync_entry_inside_a_running_loop(server):
    spec = closed(2, num_requests=6, input_tokens=8, output_tokens=2)

    async def caller():  # e.g. Streamlit or Jupyter: a loop already runs in this thread
        return run_workload_sync(build_schedule(spec), _options(server, model="m"))

    out = asyncio.run(caller())
    assert out.sent == 6 and all(r.success for r in out.results)
    assert {b["model"] for _, b in server.received} == {"m"}


def test_run_outside_loop_moves_to_a_thread_only_under_a_running_loop():
    here = threading.get_ident()
    assert run_outside_loop(threading.get_ident) == here  # no loop here: runs in place

    def own_loop() -> int:  # what bench does: start a loop of its own
        return asyncio.run(asyncio.sleep(0, result=threading.get_ident()))

    async def caller() -> int:
        return run_outside_loop(own_loop)

    assert asyncio.run(caller()) != here

    def boom() -> None:
        raise KeyError("raised in the worker")

    async def failing() -> None:
        run_outside_loop(boom)

    with pytest.raises(KeyError, match="raised in the worker"):
        asyncio.run(failing())


def test_chat_text_prompts_have_exact_lengths():
    srv = LoadServer(tokenizer=_tokenizer()).start()
    try:
        spec = closed(4, num_requests=12, input_tokens=50, output_tokens=3)
        out = run_workload_sync(build_schedule(spec), LoadOptions(url=srv.url, api="chat"))
    finally:
        srv.stop()
    assert all(r.success for r in out.results)
    assert {r.prompt_tokens for r in out.results} == {50}  # counted by the server's tokenizer
    assert all("messages" in b and b["model"] == "test-model" for _, b in srv.received)


def test_unreachable_server_is_one_clear_error():
    from core.errors import RunnerError

    spec = closed(1, num_requests=1, input_tokens=8, output_tokens=2)
    with pytest.raises(RunnerError, match=r"cannot connect to .*\(Connection refused\)"):
        run_workload_sync(build_schedule(spec), LoadOptions(url="http://127.0.0.1:9"))


@pytest.mark.slow
def test_token_id_prompts_are_exact_on_real_vllm(vllm_url):
    """No vocab size given: the id range is learnt from vLLM's /tokenize; the model name from
    /v1/models. vLLM's usage must count exactly the prompt and output we asked for."""
    spec = poisson(20.0, num_requests=12, input_tokens=48, output_tokens=7, seed=1)
    out = run_workload_sync(build_schedule(spec), LoadOptions(url=vllm_url, timeout_s=120))
    assert out.sent == 12 and all(r.success for r in out.results), out.results[0].error
    assert {(r.prompt_tokens, r.output_tokens) for r in out.results} == {(48, 7)}
    trace = closed(2, num_requests=4, input_tokens=300, output_tokens=5)
    got = run_workload_sync(build_schedule(trace), LoadOptions(url=vllm_url, timeout_s=120))
    assert {(r.prompt_tokens, r.output_tokens) for r in got.results} == {(300, 5)}


def test_workers_split_the_schedule_and_merge_results(server):
    spec = poisson(300.0, num_requests=240, input_tokens=16, output_tokens=3, seed=9)
    seen: list[int] = []
    out = run_workload_sync(build_schedule(spec), _options(server, workers=2),
                            on_result=lambda i, r: seen.append(i))
    assert out.indices == list(range(240)) and sorted(seen) == out.indices
    assert all(r.success and r.output_tokens == 3 for r in out.results)
    assert len(server.received) == 240 and out.unsent == 0
    firsts = {tuple(b["prompt"][:8]) for _, b in server.received}
    assert len(firsts) == 240  # prompts come from the global index, not the worker


def test_workers_share_the_concurrency_and_stop(server):
    server.itl_s = 0.05
    spec = closed(5, duration_s=60.0, input_tokens=8, output_tokens=10)
    stop = threading.Event()
    # Stop once the second wave is in flight (the first 5 done): the workers started and
    # shared the 5 lanes, whatever spawning them took.
    _once(lambda: len(server.received) >= 10 and server.inflight == 5, stop.set)
    out = run_workload_sync(build_schedule(spec), _options(server, workers=2), stop=stop)
    assert server.max_inflight == 5 and out.interrupted
    cancelled = [r for r in out.results if not r.success]
    assert len(cancelled) == 5 and {r.error_kind for r in cancelled} == {"cancelled"}
    assert len(out.results) == out.sent == len(server.received)


def _prefix_hits(url: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:prefix_cache_hits_total"))


@pytest.mark.slow
def test_shared_block_hashes_hit_vllms_prefix_cache(vllm_url):
    """Two requests whose hash chains share 2 of 3 blocks (64 tokens each): the second one's
    first 128 tokens are served from vLLM's prefix cache, no more, no less."""
    from runners.load.schedule import Schedule, ScheduledRequest

    def req(i, hashes):
        return ScheduledRequest(index=i, at_s=None, input_tokens=192, output_tokens=2,
                                block_hashes=hashes, block_size=64)

    first = Schedule(kind="trace", requests=[req(0, [501, 502, 503])], concurrency=1)
    second = Schedule(kind="trace", requests=[req(0, [501, 502, 999])], concurrency=1)
    opts = LoadOptions(url=vllm_url, timeout_s=120, seed=11)
    run_workload_sync(first, opts)
    before = _prefix_hits(vllm_url)
    out = run_workload_sync(second, opts)
    assert out.results[0].success and out.results[0].prompt_tokens == 192
    assert _prefix_hits(vllm_url) - before == 128


@pytest.mark.parametrize("isolate", [False, True])
def test_isolated_load_is_sent_from_a_child_process(server, isolate):
    """`isolate` (the Validate view's runs) sends from a worker process even with one worker;
    results still reach the caller's `on_result` as they finish, all of them."""
    import multiprocessing as mp

    spec = closed(4, num_requests=40, input_tokens=16, output_tokens=3, seed=2)
    children: list[int] = []
    out = run_workload_sync(build_schedule(spec), _options(server, isolate=isolate),
                            on_result=lambda i, r: children.append(len(mp.active_children())))
    assert sorted(out.indices) == list(range(40)) and all(r.success for r in out.results)
    assert len(children) == 40
    assert (min(children) >= 1) if isolate else (max(children) == 0)
