"""The load generator's timing rules on virtual time: no test here reads the wall clock.

A `Run` (runners.load.process) is driven on an event loop whose clock only moves when every task
waits (`VirtualTimeLoop`), with its `clock`/`sleep`/`transport` seam given a recording sleep and
a fake engine (`FakeEngine`) that answers each request after a fixed number of virtual seconds
and records when it saw what. So the rules hold exactly, not within a budget: a request goes
out at its offset and never before, a warm-up runs before the clock starts, a closed loop stops
sending at its duration, a stop ends the run at its instant, unsent requests are counted.
Service times are binary fractions (1/64 s per token) so that sums of them are exact.
How late the real generator sends on a real clock is bench/loadgen_lag.py's business.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np
import orjson
import pytest

from runners.load.process import (
    WARM_OPEN,
    WARM_TIMEOUT_S,
    LoadOptions,
    OnResult,
    Prepared,
    Run,
    WorkloadOutcome,
    outcome,
)
from runners.load.rawhttp import RawClient
from runners.load.schedule import Schedule, ScheduledRequest
from runners.load.schemas import RequestResult
from runners.load.workloads import build_schedule
from tests.runners.loads import burst, closed, poisson, soak

START_S = 1000.0  # the virtual clock's reading when a loop starts: offsets are not stamps
TOKEN_S = 1 / 64  # the fake engine's time per output token
EXACT = 1e-9  # float slack for sums of non-binary offsets (schedule offsets are arbitrary)

pytestmark = pytest.mark.timeout(60)


class _VirtualSelector(selectors.DefaultSelector):
    """Polls the real selector without blocking; a wait for a timer moves the clock instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer and no I/O: nothing could ever wake the loop
            raise RuntimeError("virtual loop deadlocked: no timer pending, no I/O ready")
        self.loop.now_s += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is virtual: when all tasks wait, it jumps to the next
    timer. `asyncio.sleep`, `call_at`, `asyncio.timeout` all run on it unchanged."""

    def __init__(self) -> None:
        self.now_s = START_S
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        return self.now_s


@dataclass
class FakeEngine:
    """A `Transport` that streams `max_tokens` chunks, one per `TOKEN_S` virtual seconds, and
    records every send (virtual time, body, timeout), the most in flight, and warm-ups."""

    warm_s: float = 0.0
    sends: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    timeouts_s: list[float] = field(default_factory=list)
    warms: list[tuple[float, int]] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0
    closed: bool = False

    async def warm(self, n: int) -> None:
        self.warms.append((asyncio.get_running_loop().time(), n))
        await asyncio.sleep(self.warm_s)

    async def send(self, body: bytes, *, timeout_s: float) -> RequestResult:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        req = orjson.loads(body)
        self.sends.append((sent, req))
        self.timeouts_s.append(timeout_s)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        chunks: list[float] = []
        try:
            for _ in range(req["max_tokens"]):
                await asyncio.sleep(TOKEN_S)
                chunks.append(loop.time())
        finally:
            self.inflight -= 1
        return RequestResult(success=True, http_status=200, sent_at_s=sent,
                             first_token_at_s=chunks[0], last_token_at_s=chunks[-1],
                             end_at_s=loop.time(), chunk_times_s=chunks,
                             prompt_tokens=len(req["prompt"]), output_tokens=len(chunks))

    def close(self) -> None:
        self.closed = True

    def offsets(self, t0: float) -> np.ndarray:
        return np.array([t for t, _ in self.sends]) - t0


@dataclass
class Driven:
    """What one virtual run left: its outcome, the `Run`, the sleeps asked and the end."""

    out: WorkloadOutcome
    run: Run
    engine: FakeEngine
    sleeps: list[tuple[float, float]]  # (virtual time asked, delay asked)
    ended_s: float  # virtual time at which `Run.run` returned


def _options(**kw: Any) -> LoadOptions:
    return LoadOptions(url="http://127.0.0.1:9", model="m", vocab_size=32000, **kw)


def drive(schedule: Schedule, engine: FakeEngine | None = None, *,
          stop_at_s: float | None = None, t0_s: float | None = None,
          part: tuple[int, int] = (0, 1), on_result: OnResult | None = None,
          options: LoadOptions | None = None) -> Driven:
    """Run `schedule` on virtual time; `stop_at_s` sets the stop event at START_S + it."""
    engine = engine or FakeEngine()

    async def main() -> Driven:
        loop = asyncio.get_running_loop()
        sleeps: list[tuple[float, float]] = []

        async def sleep(delay_s: float) -> None:
            sleeps.append((loop.time(), delay_s))
            await asyncio.sleep(delay_s)

        run = Run(schedule, options or _options(), Prepared(model="m", high_id=32000),
                  on_result, part, clock=loop.time, sleep=sleep, transport=engine)
        stop = asyncio.Event()
        if stop_at_s is not None:
            loop.call_at(START_S + stop_at_s, stop.set)
        await run.run(stop, t0_s)
        out = outcome(schedule, run.results, run.t0, stop.is_set(), clock=loop.time)
        return Driven(out, run, engine, sleeps, loop.time())

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())


def _at(schedule: Schedule) -> np.ndarray:
    return np.array([r.at_s for r in schedule.requests])


def _trace(offsets: list[float], *, output_tokens: int = 1,
           concurrency: int | None = None) -> Schedule:
    return Schedule(kind="trace", concurrency=concurrency, requests=[
        ScheduledRequest(index=i, at_s=t, phase="trace", input_tokens=8,
                         output_tokens=output_tokens) for i, t in enumerate(offsets)])


def test_the_virtual_loop_jumps_to_timers_and_keeps_order():
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []

        async def after(name: str, delay_s: float) -> None:
            await asyncio.sleep(delay_s)
            seen.append((name, loop.time()))

        await asyncio.gather(after("b", 7200.0), after("a", 0.25), after("c", 7200.5))
        return seen

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        seen = runner.run(main())  # two virtual hours: the module's timeout would catch real ones
    assert seen == [("a", START_S + 0.25), ("b", START_S + 7200.0), ("c", START_S + 7200.5)]


def test_open_loop_sends_each_request_at_its_offset_never_early():
    sched = build_schedule(poisson(150.0, num_requests=300, input_tokens=32, output_tokens=3,
                                   seed=4))
    d = drive(sched, options=_options(timeout_s=42.0))
    out, at = d.out, _at(sched)
    assert out.sent == 300 and out.unsent == 0 and not out.interrupted
    assert out.indices == list(range(300)) and d.run.t0 == START_S
    sent = d.engine.offsets(d.run.t0)
    assert np.all(sent >= at - EXACT)  # never early
    np.testing.assert_allclose(sent, at, rtol=0, atol=EXACT)  # and not late: the rate is kept
    # Every wait was asked for exactly the time left until the next offset, one per request.
    assert len(d.sleeps) == 300
    wake = np.array([now + delay for now, delay in d.sleeps]) - d.run.t0
    np.testing.assert_allclose(wake, at, rtol=0, atol=EXACT)
    assert [r.sent_at_s - d.run.t0 for r in out.results] == pytest.approx(at, abs=EXACT)
    assert all(r.success for r in out.results)
    assert {(r.prompt_tokens, r.output_tokens) for r in out.results} == {(32, 3)}
    assert d.engine.timeouts_s == [42.0] * 300
    # The run drains: it ends when the last request's 3 tokens are in.
    assert d.ended_s == pytest.approx(d.run.t0 + at[-1] + 3 * TOKEN_S, abs=EXACT)
    assert d.engine.closed and d.engine.inflight == 0


def test_a_request_whose_offset_has_come_goes_at_once():
    d = drive(_trace([0.0, 0.0, 0.25, 0.25, 0.5, 0.5]))
    assert d.engine.offsets(d.run.t0).tolist() == [0.0, 0.0, 0.25, 0.25, 0.5, 0.5]
    # Waits only for offsets still ahead, each for exactly the time left: never 0 or less.
    assert d.sleeps == [(START_S, 0.25), (START_S + 0.25, 0.25)]


def test_warm_up_runs_before_the_clock_starts():
    sched = _trace([0.0, 0.5, 1.0])
    d = drive(sched, FakeEngine(warm_s=0.75))
    assert d.engine.warms == [(START_S, WARM_OPEN)]  # no cap: WARM_OPEN connections
    assert d.run.t0 == d.out.started_at_s == START_S + 0.75
    assert d.engine.offsets(d.run.t0).tolist() == [0.0, 0.5, 1.0]  # the schedule is intact
    capped = drive(_trace([0.0, 0.5], concurrency=5), part=(1, 2))
    assert capped.engine.warms == [(START_S, 2)]  # this worker's share of the cap of 5


def test_a_warm_up_that_hangs_is_cut_at_its_bound():
    d = drive(_trace([0.0, 0.5]), FakeEngine(warm_s=1e6))
    assert d.run.t0 == START_S + WARM_TIMEOUT_S and d.out.sent == 2
    short = drive(_trace([0.0]), FakeEngine(warm_s=1e6), options=_options(timeout_s=3.0))
    assert short.run.t0 == START_S + 3.0  # a shorter request timeout bounds it too


def test_a_worker_sends_its_share_from_the_shared_start_instant():
    sched = build_schedule(poisson(100.0, num_requests=30, input_tokens=8, output_tokens=2, seed=9))
    t0 = START_S + 0.5  # the parent's start instant, ahead of this worker's clock
    d = drive(sched, t0_s=t0, part=(1, 3))
    assert d.run.t0 == t0 and d.out.indices == list(range(1, 30, 3))
    np.testing.assert_allclose(d.engine.offsets(t0), _at(sched)[1::3], rtol=0, atol=EXACT)
    # Prompts come from the global index: the same as the one-process run sends for them.
    whole = drive(sched)
    assert [b["prompt"] for _, b in d.engine.sends] == [
        b["prompt"] for _, b in whole.engine.sends[1::3]]


def test_open_loop_concurrency_cap_delays_but_never_advances_a_send():
    sched = build_schedule(poisson(2000.0, num_requests=80, max_in_flight=5, input_tokens=8,
                                   output_tokens=4, seed=1))
    d = drive(sched)
    assert d.engine.max_inflight == 5 and d.out.sent == 80
    assert all(r.success for r in d.out.results)
    # A request goes at its offset, after the one before it, once one of the 5 slots is free
    # (the request 5 before it has finished: service is the same for all), and no later.
    at, service = _at(sched), 4 * TOKEN_S
    expected: list[float] = []
    for i, t in enumerate(at):
        ready = [t] + expected[-1:] + ([expected[i - 5] + service] if i >= 5 else [])
        expected.append(max(ready))
    np.testing.assert_allclose(d.engine.offsets(d.run.t0), expected, rtol=0, atol=EXACT)
    assert (np.asarray(expected) > at + EXACT).any()  # the cap did hold some back


def test_closed_loop_keeps_exactly_the_concurrency():
    sched = build_schedule(closed(8, num_requests=120, input_tokens=16, output_tokens=5))
    seen: list[int] = []
    d = drive(sched, on_result=lambda i, r: seen.append(i))
    assert d.engine.max_inflight == 8 and d.out.sent == 120
    assert sorted(seen) == list(range(120)) and len(seen) == 120
    # Each finished request is replaced at once: 15 waves of 8, one service time apart.
    waves = np.round(d.engine.offsets(d.run.t0) / (5 * TOKEN_S))
    assert np.bincount(waves.astype(int)).tolist() == [8] * 15
    assert all(r.success and r.output_tokens == 5 and r.prompt_tokens == 16
               for r in d.out.results)
    prompts = [tuple(b["prompt"][:16]) for _, b in d.engine.sends]
    assert len(set(prompts)) == 120  # no accidental prefix reuse between requests


def test_closed_loop_stops_sending_at_the_duration():
    sched = build_schedule(closed(3, duration_s=0.625, input_tokens=8, output_tokens=4))
    d = drive(sched)
    sent = d.engine.offsets(d.run.t0)
    # Requests of 1/16 s: each lane sends at 0, 1/16, …, 9/16; at 10/16 = 0.625 it stops.
    assert sorted(sent.tolist()) == sorted([k / 16 for k in range(10)] * 3)
    assert d.out.sent == 30 and d.out.unsent == 0 and not d.out.interrupted
    assert d.out.indices == list(range(30)) and all(r.success for r in d.out.results)
    assert d.ended_s == d.run.t0 + 0.625  # the last ones finish; none is cut off


def test_stop_ends_the_run_at_once_keeping_finished_and_cancelling_in_flight():
    sched = build_schedule(closed(4, duration_s=60.0, input_tokens=8, output_tokens=40))
    calls: list[int] = []
    # Requests of 40/64 = 0.625 s: two waves done by 1.25 s, the third in flight at 1.5 s.
    d = drive(sched, stop_at_s=1.5, on_result=lambda i, r: calls.append(i))
    out = d.out
    assert d.ended_s == START_S + 1.5  # the stop does not wait for anything in flight
    assert out.interrupted and out.sent == len(out.results) == len(calls) == 12
    assert out.indices == list(range(12)) and out.unsent == 0
    cancelled = [r for r in out.results if not r.success]
    assert len(cancelled) == 4  # exactly the requests in flight at the stop
    assert {r.error_kind for r in cancelled} == {"cancelled"}
    assert {(r.sent_at_s, r.end_at_s) for r in cancelled} == {(START_S + 1.25, START_S + 1.5)}
    done = [r for r in out.results if r.success]
    assert len(done) == 8 and all(r.output_tokens == 40 for r in done)
    assert d.engine.inflight == 0 and d.engine.closed


def test_stop_in_open_loop_counts_unsent():
    sched = build_schedule(poisson(20.0, num_requests=200, input_tokens=8, output_tokens=2, seed=3))
    d = drive(sched, stop_at_s=1.0)
    before = int((_at(sched) < 1.0).sum())
    assert 0 < before < 200
    assert d.out.interrupted and d.out.sent == before and d.out.unsent == 200 - before
    assert d.out.indices == list(range(before))
    assert d.engine.offsets(d.run.t0).max() < 1.0 and d.ended_s == START_S + 1.0


def test_burst_phases_are_reported_and_sent_inside_their_windows():
    spec = burst(20.0, 200.0, 0.5, 0.5, input_tokens=8, output_tokens=2)
    sched = build_schedule(spec)
    d = drive(sched)
    assert d.out.phases == [sched.requests[i].phase for i in d.out.indices]
    counts = {p: d.out.phases.count(p) for p in ("steady", "burst", "recovery")}
    assert counts == {"steady": 10, "burst": 100, "recovery": 10}  # rate × phase length
    windows = {p.name: (p.start_s, p.end_s) for p in sched.phases}
    for offset, phase in zip(d.engine.offsets(d.run.t0), d.out.phases, strict=True):
        assert windows[phase][0] <= offset < windows[phase][1]


def test_soak_closed_loop_phases_by_send_time():
    spec = soak(0.5, 1.0, concurrency=2, input_tokens=8, output_tokens=4)
    d = drive(build_schedule(spec))
    offsets = [r.sent_at_s - d.out.started_at_s for r in d.out.results]
    for offset, phase in zip(offsets, d.out.phases, strict=True):
        assert phase == ("w0" if offset < 0.5 else "w1")
    # Sends every 1/16 s: 8 per lane in each window, and the one sent exactly at 0.5 is w1's.
    assert d.out.phases.count("w0") == d.out.phases.count("w1") == 16
    assert {p for o, p in zip(offsets, d.out.phases, strict=True) if o == 0.5} == {"w1"}


def test_a_failing_callback_stops_sending():
    sched = build_schedule(closed(2, num_requests=50, input_tokens=8, output_tokens=2))
    calls: list[int] = []

    def boom(i: int, r: RequestResult) -> None:
        calls.append(i)
        raise ValueError("store is full")

    d = drive(sched, on_result=boom)
    assert isinstance(d.run.callback_error, ValueError)
    assert len(d.engine.sends) == 2 and calls == [0]  # the first wave only; called once
    assert d.ended_s == START_S + 2 * TOKEN_S


@pytest.mark.parametrize(("transport", "url", "raw"), [
    ("raw", "http://127.0.0.1:9", True), ("aiohttp", "http://127.0.0.1:9", False),
    ("raw", "https://127.0.0.1:9", False)])
def test_without_the_seam_a_run_reads_the_real_clock(transport: str, url: str, raw: bool):
    run = Run(_trace([0.0]), LoadOptions(url=url, transport=transport, vocab_size=32000),
              Prepared(model="m", high_id=32000), None, (0, 1))
    clock: Callable[[], float] = run.clock
    assert clock is perf_counter and run.sleep is asyncio.sleep
    assert isinstance(run.raw, RawClient) if raw else run.raw is None
