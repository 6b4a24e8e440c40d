"""One process's share of a load-generator run, and the records around it: the options
(`LoadOptions`), what a server must tell first (`Prepared`), the run (`Run`: bodies built just
in time, open- and closed-loop dispatch, stop and drain) and its `WorkloadOutcome`.

`runners.load.generator` (one process) and `runners.load.workers` (many) both drive a `Run`; it
lives here so neither imports the other's internals. Hot path: see `runners.load.generator`.

Test seam: a `Run` reads time only through its `clock`, waits for a send offset only through
its `sleep`, and sends through its `transport` (keyword-only; the defaults are perf_counter,
asyncio.sleep and the transport `LoadOptions.transport` names). Tests pass a virtual clock
and a recording fake transport, so the timing rules (never early, stop at the duration, a stop
cancels what is in flight) are checked without reading the wall clock.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from time import perf_counter
from typing import Any, Literal, Protocol

import aiohttp
import orjson
from pydantic import Field, field_validator

from core.records import Record
from runners.load import prompts
from runners.load.client import Clock, check_http_url, endpoint_url, send_body
from runners.load.rawhttp import RawClient
from runners.load.schedule import Schedule
from runners.load.schemas import Api, RequestResult

OnResult = Callable[[int, RequestResult], None]
Sleep = Callable[[float], Awaitable[None]]
PromptMode = Literal["auto", "token_ids", "text"]
WARM_OPEN = 16  # connections opened ahead of an open-loop run without a concurrency bound
WARM_TIMEOUT_S = 10.0


class Transport(Protocol):
    """What a `Run` sends through: `runners.load.rawhttp.RawClient`'s interface."""

    async def warm(self, n: int) -> None:
        """Open `n` connections before the run's clock starts."""

    async def send(self, body: bytes, *, timeout_s: float) -> RequestResult:
        """POST one request body and stream its answer; a failure is a failed result."""

    def close(self) -> None:
        """Close the open connections."""


class LoadOptions(Record):
    """Where and how to send a schedule."""

    url: str = Field(description="Server base (`http://h:p`, `.../v1`) or full endpoint URL.")
    model: str | None = Field(default=None,
                              description="Served model name; None = first of /v1/models.")
    api: Api = "completions"
    timeout_s: float = Field(default=600.0, gt=0, description="Bound on each whole request.")
    workers: int = Field(default=1, ge=1, description="Processes sharing the load.")
    isolate: bool = Field(
        default=False, description="Send from worker processes even with one worker: the "
        "caller's process (e.g. the app's server) then cannot delay the sockets' reads.")
    prompt_mode: PromptMode = Field(default="auto",
                                    description="auto: ids on completions, else text.")
    vocab_size: int | None = Field(default=None,
                                   gt=0, description="Exclusive top of prompt token ids; "
                                   "None = learnt from the server's /tokenize.")
    low_token_id: int = Field(default=prompts.DEFAULT_LOW_ID, ge=0)
    ignore_eos: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    use_uvloop: bool = True
    transport: Literal["raw", "aiohttp"] = Field(
        default="raw", description="raw: the fast HTTP/1.1 client (http:// only, else aiohttp).")

    _url = field_validator("url")(check_http_url)


class WorkloadOutcome(Record):
    """What a run did. `results[k]` is the request sent as schedule index `indices[k]`
    (with one worker, `indices == range(sent)`); unsent requests are absent and counted."""

    results: list[RequestResult]
    indices: list[int]
    phases: list[str] = Field(description="Phase of each result (closed loop: at its send).")
    started_at_s: float = Field(description="perf_counter at the run start (offset 0).")
    ended_at_s: float
    sent: int
    unsent: int = Field(description="Scheduled requests never sent (stopped early); 0 for pools.")
    interrupted: bool


class Prepared(Record):
    """What every worker needs besides the schedule: resolved model, id range, text prompts."""

    model: str
    high_id: int | None = None
    texts: dict[int, list[str]] = Field(default_factory=dict, description="length -> prompts")


def client_session(limit: int, *, timeout_s: float | None = None) -> aiohttp.ClientSession:
    """The aiohttp session of a run (or of its preparation) with `limit` connections; each
    call through it is bounded by `timeout_s` (None: the run bounds each request itself)."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=None,
                                     enable_cleanup_closed=False)
    return aiohttp.ClientSession(connector=connector,
                                 timeout=aiohttp.ClientTimeout(total=timeout_s),
                                 skip_auto_headers=("User-Agent",))


class _Bodies:
    """Builds each request's JSON body from pre-encoded pieces (orjson, no pydantic)."""

    def __init__(self, schedule: Schedule, options: LoadOptions, prep: Prepared) -> None:
        self.schedule, self.texts = schedule, prep.texts
        self.tokens = None if prep.high_id is None else prompts.TokenPrompts(
            prep.high_id, low_id=options.low_token_id, seed=options.seed)
        extra = dict(options.extra_body)
        extra.update(model=prep.model, ignore_eos=options.ignore_eos, stream=True,
                     stream_options={"include_usage": True})
        self.head = orjson.dumps(extra)[:-1] + b',"max_tokens":'
        self.key = b',"messages":[{"role":"user","content":' if options.api == "chat" else (
            b',"prompt":')
        self.tail = b"}]}" if options.api == "chat" else b"}"

    def body(self, index: int) -> bytes:
        req = self.schedule.request(index)
        if self.tokens is not None:
            prompt: Any = self.tokens.prompt(index, req.input_tokens, req.block_hashes,
                                             req.block_size)
        else:
            pool = self.texts[req.input_tokens]
            prompt = pool[index % len(pool)]
        return b"".join((self.head, str(req.output_tokens).encode(), self.key,
                         orjson.dumps(prompt), self.tail))


class Run:
    """One process's share of a run: the in-flight tasks, results and the stop wiring.

    `clock`, `sleep` and `transport` are the test seam (module docstring); `transport=None`
    is the raw client for `http://` with `options.transport == "raw"`, else aiohttp.
    """

    def __init__(self, schedule: Schedule, options: LoadOptions, prep: Prepared,
                 on_result: OnResult | None, part: tuple[int, int], *,
                 clock: Clock = perf_counter, sleep: Sleep = asyncio.sleep,
                 transport: Transport | None = None) -> None:
        self.schedule, self.options, self.on_result = schedule, options, on_result
        self.clock, self.sleep = clock, sleep
        self.bodies = _Bodies(schedule, options, prep)
        self.target = endpoint_url(options.url, options.api)
        if transport is None and options.transport == "raw" and self.target.startswith(
                "http://"):
            transport = RawClient(self.target)
        self.raw = transport
        self.worker, self.n_workers = part
        self.results: dict[int, tuple[RequestResult, str]] = {}
        self.inflight: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.callback_error: BaseException | None = None
        self.t0 = 0.0

    def _record(self, index: int, result: RequestResult, phase: str) -> None:
        self.results[index] = (result, phase)
        if self.on_result is not None and self.callback_error is None:
            try:
                self.on_result(index, result)
            except Exception as exc:  # a failing consumer stops the run; re-raised at the end
                self.callback_error = exc
                self.stopping = True

    async def one(self, session: aiohttp.ClientSession, index: int, phase: str | None) -> None:
        body = self.bodies.body(index)
        sent_at = self.clock()
        try:
            timeout_s = self.options.timeout_s
            result = await (self.raw.send(body, timeout_s=timeout_s) if self.raw is not None
                            else send_body(session, self.target, body, timeout_s=timeout_s))
        except asyncio.CancelledError:
            now = self.clock()
            self._record(index, RequestResult.model_construct(
                success=False, error="run stopped while the request was in flight",
                error_kind="cancelled", http_status=None, sent_at_s=sent_at,
                first_token_at_s=None, last_token_at_s=None, end_at_s=now, chunk_times_s=[],
                chunk_tokens=None, prompt_tokens=None, output_tokens=None),
                phase or self.schedule.phase_at(sent_at - self.t0))
            raise
        # A time-windowed phase is the window of the send time the result records (a stamp
        # taken here could fall on the other side of a window edge).
        self._record(index, result, phase or self.schedule.phase_at(result.sent_at_s - self.t0))

    def my_indices(self) -> Iterator[int]:
        n = None if self.schedule.cycle else len(self.schedule.requests)
        counter = itertools.count(self.worker, self.n_workers)
        return counter if n is None else iter(range(self.worker, n, self.n_workers))

    async def open_loop(self, session: aiohttp.ClientSession) -> None:
        limit = self.schedule.concurrency
        sem = asyncio.Semaphore(_share(limit, self.worker, self.n_workers)) if limit else None
        reqs, loop = self.schedule.requests, asyncio.get_running_loop()
        for i in self.my_indices():
            if self.stopping:
                return
            req = reqs[i]
            at_s = req.at_s
            assert at_s is not None  # open loop: the schedule gives every request an offset
            delay = self.t0 + at_s - self.clock()
            if delay > 0:
                await self.sleep(delay)
            if sem is not None:
                await sem.acquire()
            task = loop.create_task(self.one(session, i, req.phase))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
            if sem is not None:
                task.add_done_callback(lambda _t: sem.release())

    async def closed_loop(self, session: aiohttp.ClientSession) -> None:
        indices = self.my_indices()
        end = self.t0 + (self.schedule.duration_s or float("inf"))
        cycle = self.schedule.cycle

        async def lane() -> None:
            for i in indices:
                if self.stopping or self.clock() >= end:
                    return
                await self.one(session, i, None if cycle else self.schedule.request(i).phase)

        n = _share(self.schedule.concurrency or 1, self.worker, self.n_workers)
        lanes = [asyncio.create_task(lane()) for _ in range(n)]
        for task in lanes:
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
        await asyncio.gather(*lanes, return_exceptions=True)

    async def run(self, stop: asyncio.Event | None, t0: float | None = None) -> None:
        limit = self.schedule.concurrency or 0
        share = _share(limit, self.worker, self.n_workers) if limit else 0
        async with client_session(share) as session:
            await self._warm(share or WARM_OPEN)
            self.t0 = self.clock() if t0 is None else t0
            dispatch = asyncio.create_task(
                self.open_loop(session) if self.schedule.open_loop else self.closed_loop(session))
            watch = asyncio.create_task(stop.wait()) if stop is not None else None
            waiting = {dispatch} if watch is None else {dispatch, watch}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if watch is not None and watch.done():
                await self._halt(dispatch)
            else:
                await self._drain(stop)
            if watch is not None:
                watch.cancel()
            if self.raw is not None:
                self.raw.close()

    async def _warm(self, n: int) -> None:
        """Open the connections the first requests will use before the clock starts; a server
        that does not accept them in time is left to fail the requests themselves."""
        if self.raw is None:
            return
        try:
            async with asyncio.timeout(min(WARM_TIMEOUT_S, self.options.timeout_s)):
                await self.raw.warm(n)
        except TimeoutError:
            pass

    async def _drain(self, stop: asyncio.Event | None) -> None:
        """Wait for the in-flight requests; a stop meanwhile cancels them."""
        while self.inflight:
            pending = set(self.inflight)
            watch = asyncio.ensure_future(stop.wait()) if stop is not None else None
            await asyncio.wait(pending | ({watch} if watch else set()),
                               return_when=asyncio.FIRST_COMPLETED)
            if watch is not None:
                if watch.done():
                    await self._halt(None)
                    return
                watch.cancel()

    async def _halt(self, dispatch: asyncio.Task[None] | None) -> None:
        self.stopping = True
        if dispatch is not None:
            dispatch.cancel()
        tasks = list(self.inflight)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *([dispatch] if dispatch else []), return_exceptions=True)


def _share(total: int, worker: int, n_workers: int) -> int:
    """Worker `worker`'s part of `total` (parts differ by at most one, at least one)."""
    return max(1, total // n_workers + (1 if worker < total % n_workers else 0))


def outcome(schedule: Schedule, results: dict[int, tuple[RequestResult, str]], t0: float,
            interrupted: bool, *, clock: Clock = perf_counter) -> WorkloadOutcome:
    """The outcome of a run whose results (index -> (result, phase)) began at `t0` (on
    `clock`, which also stamps its end)."""
    order = sorted(results)
    sent = len(order)
    unsent = 0 if schedule.cycle else len(schedule.requests) - sent
    return WorkloadOutcome.model_construct(
        results=[results[i][0] for i in order], indices=order,
        phases=[results[i][1] for i in order], started_at_s=t0, ended_at_s=clock(),
        sent=sent, unsent=unsent, interrupted=interrupted)
