"""Benchmark of the request clients' timing accuracy: the error each adds to TTFT, chunks, ITL.

A local aiohttp server, in a thread of this process, streams a scripted completion and stamps
each write with `time.perf_counter()` just before it: the clock the clients stamp on, so a
client's added error is measured, not guessed. Three clients send the same requests, one after
another, on one kept-alive connection each:

* `plain-aiohttp` (the baseline): a plain aiohttp line reader that stamps `perf_counter()` per
  content line, bench/loadgen/plain_aiohttp.py's loop;
* `send`: `runners.load.client.send` (aiohttp; a read is stamped when the loop hands it over);
* `raw`: `runners.load.rawhttp.RawClient` (a read keeps the kernel's receive stamp on Linux).

Scenario 1, added error: each request's first content chunk comes --first-ms after the request,
then --chunks - 1 more every --gap-ms, the usage chunk and [DONE]. A chunk's added error is the
client's stamp minus the server's write stamp; TTFT's is that of the first chunk; ITL's is the
client's gap minus the server's. Scenario 2, kernel-stamp gap fidelity: the server writes "b"
--hold-gap-ms after "a" while the client's loop is stuck (time.sleep --block-ms) right after it
read "a"; the gap error is the recorded gap minus the wire's. A loop-stamping client records the
end of the block instead; the raw client should record the wire's gap.

Budgets (the real-clock half of tests/runners/load/test_client.py's and test_rawhttp.py's old
asserts, issue 28): for `send` and `raw`, TTFT added error mean < 2 ms, per-chunk added error
p99 < 8 ms, and no stamp before its write; for `raw` on Linux, gap error |p99| < 2 ms. Exit 1
when one is missed; the figures are printed either way. Ratios are against `plain-aiohttp`
measured in the same run (the gap ratio against `send`, the loop-stamping transport).

Run: .venv/bin/python bench/client_timing.py [--requests 200] [--chunks 8] [--first-ms 5]
     [--gap-ms 2] [--hold-requests 30] [--hold-gap-ms 20] [--block-ms 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

import aiohttp
import numpy as np
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.load.client import build_payload, endpoint_url, send
from runners.load.rawhttp import RawClient
from runners.load.schemas import RequestSpec
from runners.load.stamped_socket import Receiver, StampedSocket, open_stamped

SPEC = RequestSpec(model="m", prompt="hello", max_tokens=8)
WARMUP_REQUESTS = 5  # per client, not measured: connection set up, kernel stamping on
TTFT_MEAN_BUDGET_MS = 2.0
CHUNK_P99_BUDGET_MS = 8.0
GAP_P99_BUDGET_MS = 2.0
BASELINE = "plain-aiohttp"
CLIENTS = (BASELINE, "send", "raw")


def _event(obj: dict | str) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


def _text(t: str) -> bytes:
    return _event({"choices": [{"index": 0, "text": t}]})


USAGE = _event({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
DONE = _event("[DONE]")
A_MARK = b'"text": "a"'  # in the read that brings the hold scenario's first chunk


@dataclass
class Script:
    """What the server streams: sleep `delays_s[i]`, write content chunk i; then the usage
    chunk and [DONE]."""

    delays_s: list[float]
    texts: list[str] = field(default_factory=list)


class StubServer:
    """An aiohttp server in a thread; `script` answers every request and `writes` collects,
    per request, the perf_counter just before each content write."""

    def __init__(self) -> None:
        self.script = Script([])
        self.writes: list[list[float]] = []
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        script, stamps = self.script, []
        self.writes.append(stamps)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for delay_s, text in zip(script.delays_s, script.texts, strict=True):
            if delay_s:
                await asyncio.sleep(delay_s)
            stamps.append(perf_counter())
            await resp.write(_text(text))
        await resp.write(USAGE + DONE)
        await resp.write_eof()
        return resp

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._started.set()
        self._loop.run_forever()

    def start(self) -> StubServer:
        self._thread.start()
        if not self._started.wait(10):
            raise SystemExit("the stub server did not start")
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# One request: (the hold scenario's block after "a", or None) -> content chunk stamps.
Request = Callable[[float | None], Awaitable[list[float]]]


def _block_on_second_call(block_s: float | None) -> Callable[[], float]:
    """`send`'s clock: perf_counter, and the loop stuck for `block_s` right after stamping the
    first body read (the first call stamps the send)."""
    calls = 0

    def clock() -> float:
        nonlocal calls
        now = perf_counter()
        calls += 1
        if calls == 2 and block_s is not None:
            time.sleep(block_s)
        return now

    return clock


class _BlockAfterA:
    """A `Receiver` in front of the raw client's: when armed, the read that brings "a" sticks
    the loop for `block_s` (after the read was stamped)."""

    def __init__(self, inner: Receiver, owner: _RawRequests) -> None:
        self.inner, self.owner = inner, owner

    def connection_made(self, transport: StampedSocket) -> None:
        self.inner.connection_made(transport)

    def received(self, now: float, data: bytes) -> None:
        self.inner.received(now, data)
        block_s = self.owner.block_s
        if block_s is not None and A_MARK in data:
            self.owner.block_s = None
            time.sleep(block_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)


class _RawRequests:
    def __init__(self, url: str) -> None:
        self.block_s: float | None = None
        self.client = RawClient(endpoint_url(url, "completions"), connect=self._connect)
        self.body = json.dumps(build_payload(SPEC)).encode()

    async def _connect(self, host: str, port: int, receiver: Receiver) -> StampedSocket:
        return await open_stamped(host, port, _BlockAfterA(receiver, self))

    async def __call__(self, block_s: float | None) -> list[float]:
        self.block_s = block_s
        r = await self.client.send(self.body, timeout_s=10)
        if not r.success:
            raise SystemExit(f"raw: {r.error}")
        return r.chunk_times_s


async def _plain(session: aiohttp.ClientSession, url: str, block_s: float | None) -> list[float]:
    """The baseline: read SSE lines, stamp each content line as it is read."""
    stamps: list[float] = []
    body = json.dumps(build_payload(SPEC)).encode()
    async with session.post(url + "/v1/completions", data=body,
                            headers={"Content-Type": "application/json"}) as resp:
        async for line in resp.content:
            if line.startswith(b"data: {") and b'"text"' in line:
                stamps.append(perf_counter())
                if block_s is not None and len(stamps) == 1:
                    time.sleep(block_s)
    return stamps


async def _measure(client: str, url: str, runs: list[tuple[Script, float | None, int]],
                   server: StubServer) -> list[list[list[float]]]:
    """For each (script, block, n): the content chunk stamps of n requests, after warm-up."""
    async with aiohttp.ClientSession() as session:
        raw = _RawRequests(url) if client == "raw" else None

        async def one(block_s: float | None) -> list[float]:
            if raw is not None:
                return await raw(block_s)
            if client == BASELINE:
                return await _plain(session, url, block_s)
            r = await send(session, url, SPEC, timeout_s=10, clock=_block_on_second_call(block_s))
            if not r.success:
                raise SystemExit(f"send: {r.error}")
            return r.chunk_times_s

        out = []
        try:
            for script, block_s, n in runs:
                server.script = script
                for _ in range(WARMUP_REQUESTS):
                    await one(block_s)
                out.append([await one(block_s) for _ in range(n)])
        finally:
            if raw is not None:
                raw.client.close()
        return out


def _ms(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=float) * 1e3


def _row(name: str, arr: np.ndarray) -> str:
    return (f"{name:<14} mean {arr.mean():7.3f}  p50 {np.percentile(arr, 50):7.3f}  "
            f"p99 {np.percentile(arr, 99):7.3f}  max {arr.max():7.3f}  min {arr.min():7.3f}")


@dataclass
class Figures:
    """One client's added errors (ms) in scenario 1, and its gap errors in scenario 2."""

    ttft: np.ndarray
    chunk: np.ndarray
    itl: np.ndarray
    gap: np.ndarray | None = None


def _figures(stamps: list[list[float]], writes: list[list[float]]) -> Figures:
    ttft, chunk, itl = [], [], []
    for got, wrote in zip(stamps, writes, strict=True):
        if len(got) != len(wrote):
            raise SystemExit(f"{len(got)} content stamps for {len(wrote)} writes")
        ttft.append(got[0] - wrote[0])
        chunk.extend(g - w for g, w in zip(got, wrote, strict=True))
        itl.extend((g1 - g0) - (w1 - w0)
                   for g0, g1, w0, w1 in zip(got, got[1:], wrote, wrote[1:], strict=False))
    return Figures(_ms(ttft), _ms(chunk), _ms(itl))


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="scenario 1, per client")
    ap.add_argument("--chunks", type=int, default=8, help="content chunks per request")
    ap.add_argument("--first-ms", type=float, default=5.0)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--hold-requests", type=int, default=30, help="scenario 2, per client")
    ap.add_argument("--hold-gap-ms", type=float, default=20.0)
    ap.add_argument("--block-ms", type=float, default=60.0)
    args = ap.parse_args()
    if args.block_ms <= args.hold_gap_ms:
        ap.error("--block-ms must exceed --hold-gap-ms (b must arrive during the block)")
    if args.chunks < 2:
        ap.error("--chunks must be at least 2 (ITL needs a gap)")
    return args


def _run(args: argparse.Namespace) -> dict[str, Figures]:
    """Both scenarios for every client, in turn, against one server."""
    stream = Script([args.first_ms / 1e3] + [args.gap_ms / 1e3] * (args.chunks - 1),
                    [f"t{i}" for i in range(args.chunks)])
    hold = Script([0.0, args.hold_gap_ms / 1e3], ["a", "b"])
    runs = [(stream, None, args.requests), (hold, args.block_ms / 1e3, args.hold_requests)]
    server = StubServer().start()
    figures: dict[str, Figures] = {}
    try:
        for client in CLIENTS:
            server.writes = []
            started = perf_counter()
            stream_stamps, hold_stamps = asyncio.run(_measure(client, server.url, runs, server))
            took = perf_counter() - started
            w_stream = server.writes[WARMUP_REQUESTS:WARMUP_REQUESTS + args.requests]
            w_hold = server.writes[2 * WARMUP_REQUESTS + args.requests:]
            figures[client] = _figures(stream_stamps, w_stream)
            figures[client].gap = _figures(hold_stamps, w_hold).itl
            print(f"  {client}: {took:.1f} s")
    finally:
        server.stop()
    return figures


def _report(figures: dict[str, Figures], args: argparse.Namespace) -> None:
    base = figures[BASELINE]
    print("\nTTFT added error, ms (client's first-chunk stamp minus the server's write stamp)")
    for name, f in figures.items():
        print(_row(name, f.ttft) + f"  mean x{f.ttft.mean() / base.ttft.mean():.2f} of {BASELINE}")
    print("\nper-chunk added error, ms (every content chunk)")
    for name, f in figures.items():
        ratio = np.percentile(f.chunk, 99) / np.percentile(base.chunk, 99)
        print(_row(name, f.chunk) + f"  p99 x{ratio:.2f} of {BASELINE}")
    print("\nITL error, ms (client's gap minus the server's)")
    for name, f in figures.items():
        print(_row(name, f.itl))
    print("\nscenario 2 gap error, ms (recorded gap minus the wire's; the loop was stuck "
          f"{args.block_ms - args.hold_gap_ms:g} ms past the wire's arrival of \"b\")")
    loop_stamped = np.abs(_gap(figures["send"])).mean()
    for name, f in figures.items():
        ratio = np.abs(_gap(f)).mean() / loop_stamped
        print(_row(name, _gap(f)) + f"  |mean| x{ratio:.3f} of send")


def _gap(f: Figures) -> np.ndarray:
    assert f.gap is not None  # set by _run
    return f.gap


def _budgets(figures: dict[str, Figures]) -> int:
    """Print each budget's verdict; the number missed."""
    checks: list[tuple[str, float, float, str]] = []  # (what, figure, budget, "<" or ">=")
    for name in ("send", "raw"):
        f = figures[name]
        checks.append((f"{name} TTFT added error mean", float(f.ttft.mean()),
                       TTFT_MEAN_BUDGET_MS, "<"))
        checks.append((f"{name} per-chunk added error p99", float(np.percentile(f.chunk, 99)),
                       CHUNK_P99_BUDGET_MS, "<"))
        checks.append((f"{name} smallest added error (no stamp before its write)",
                       float(f.chunk.min()), 0.0, ">="))
    if sys.platform == "linux":
        checks.append(("raw gap error |p99|", float(np.percentile(np.abs(_gap(figures["raw"])),
                                                                  99)), GAP_P99_BUDGET_MS, "<"))
    else:
        print("\n(no kernel receive stamps off Linux: the raw gap budget is not checked)")
    print("\nbudgets")
    missed = 0
    for what, value, budget, op in checks:
        ok = value < budget if op == "<" else value >= budget
        missed += not ok
        print(f"  {'ok  ' if ok else 'MISS'} {what}: {value:.3f} ms {op} {budget:g} ms")
    return missed


def main() -> int:
    args = _args()
    print(f"client timing: {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}, Python {sys.version.split()[0]}, "
          f"aiohttp {aiohttp.__version__}")
    print(f"scenario 1: {args.requests} requests x {args.chunks} content chunks (first after "
          f"{args.first_ms:g} ms, then every {args.gap_ms:g} ms), sequential, per client")
    print(f"scenario 2: {args.hold_requests} requests, \"b\" {args.hold_gap_ms:g} ms after "
          f"\"a\", the client's loop stuck {args.block_ms:g} ms after reading \"a\"")
    figures = _run(args)
    _report(figures, args)
    return 1 if _budgets(figures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
