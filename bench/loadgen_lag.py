"""Benchmark of the load generator's send timing on a real clock: how far behind its scheduled
offset each request reaches a loopback sink.

Runs the real generator (`runners.load.generator.run_workload_sync`: raw transport, uvloop, as users
run it; once in one process and once with `--workers 2`) on a seeded Poisson schedule against a
minimal HTTP/1.1 streaming sink in a child process, which stamps each request when its first
bytes arrive (perf_counter is CLOCK_MONOTONIC: one clock for every process). First, the named
baseline on the same schedule and sink, in the same run: a naive loop that `asyncio.sleep`s
until each offset and starts one aiohttp POST task per request. Lag = k-th arrival − (the run's
start + k-th offset), both sorted. With two or more cores the sink gets core 0 and the clients
core 1, so the sink's own work does not delay a client's sends.

Budget (the one the unit tests held until issue 28; they now test the timing rules on virtual
time, tests/runners/load/test_generator_timing.py): for each ServeFit run, median lag < 20 ms and
never early by more than 3 ms (min lag > −3 ms). Exit status: 0 met, 1 missed, 2 the
measurement is void (a request was lost or failed).

Run: .venv/bin/python bench/loadgen_lag.py [--rate 150] [--requests 600] [--seed 4]
     [--median-budget-ms 20] [--early-budget-ms 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import urllib.request
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from time import perf_counter
from typing import Any

import aiohttp
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.load import fixed
from core.loop import run_coroutine
from runners.load.generator import run_workload_sync
from runners.load.process import LoadOptions
from runners.load.schedule import Schedule
from runners.load.workloads import build_schedule

MEDIAN_BUDGET_MS = 20.0
EARLY_BUDGET_MS = 3.0
SINK_CORE, CLIENT_CORE = 0, 1
SINK_START_S = 30.0


class _SinkProtocol(asyncio.Protocol):
    """One sink connection: keep-alive HTTP/1.1 requests with Content-Length bodies. A POST is
    stamped at its first byte and answered with `max_tokens` SSE chunks, usage and [DONE] in
    one write; `GET /stamps` returns the stamps so far and clears them."""

    def __init__(self, stamps: list[float]) -> None:
        self.stamps, self.buf, self.first = stamps, b"", 0.0

    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        if not self.buf:
            self.first = now
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15:].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            stamp, self.first = self.first, now
            if head.startswith(b"get /stamps"):
                self._reply("application/json", orjson.dumps(self.stamps))
                self.stamps.clear()
            else:
                self.stamps.append(stamp)
                self._reply("text/event-stream", _stream(orjson.loads(body)))

    def _reply(self, kind: str, payload: bytes) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (kind.encode(), len(payload), payload))


def _stream(req: dict[str, Any]) -> bytes:
    chunk = b'data: {"choices":[{"index":0,"text":" t"}]}\n\n'
    prompt = req.get("prompt", [])
    usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 1,
             "completion_tokens": int(req["max_tokens"])}
    return (chunk * int(req["max_tokens"]) + b"data: " + orjson.dumps(
        {"choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n")


def _sink_main(conn: Connection, core: int | None) -> None:
    """Child process: serve on a free loopback port, send the port back, serve until killed."""
    if core is not None:
        os.sched_setaffinity(0, {core})

    async def serve() -> None:
        stamps: list[float] = []
        server = await asyncio.get_running_loop().create_server(
            lambda: _SinkProtocol(stamps), "127.0.0.1", 0, backlog=1024)
        conn.send(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    run_coroutine(serve(), use_uvloop=True)


@dataclass
class Lag:
    """One client's run: the lag of every arrival (ms) and how many were answered."""

    client: str
    lag_ms: np.ndarray
    answered: int
    scheduled: int

    def row(self) -> str:
        med, p99, low = (np.median(self.lag_ms), np.percentile(self.lag_ms, 99),
                         self.lag_ms.min())
        return (f"{self.client:<30} {med:>9.2f} {p99:>9.2f} {low:>9.2f} "
                f"{self.answered:>6}/{self.scheduled}")


def _arrivals(url: str) -> np.ndarray:
    with urllib.request.urlopen(url + "/stamps", timeout=30) as resp:
        return np.sort(np.asarray(json.loads(resp.read()), dtype=float))


def _lag(client: str, url: str, at_s: np.ndarray, t0: float, answered: int) -> Lag:
    arrivals = _arrivals(url)
    if len(arrivals) != len(at_s):
        print(f"void: {client}: the sink saw {len(arrivals)} of {len(at_s)} requests")
        raise SystemExit(2)
    return Lag(client, (arrivals - t0 - np.sort(at_s)) * 1e3, answered, len(at_s))


def run_servefit(schedule: Schedule, url: str, workers: int) -> Lag:
    opts = LoadOptions(url=url, model="bench", vocab_size=32000, workers=workers)
    out = run_workload_sync(schedule, opts)
    answered = sum(r.success for r in out.results)
    name = "servefit" + (f" --workers {workers}" if workers > 1 else "")
    return _lag(name, url, _offsets(schedule), out.started_at_s, answered)


async def _naive(schedule: Schedule, url: str) -> tuple[float, int]:
    """The baseline: sleep until each offset, then start the request's task."""
    body = orjson.dumps({"model": "bench", "prompt": [1] * schedule.requests[0].input_tokens,
                         "max_tokens": schedule.requests[0].output_tokens, "stream": True})
    answered = 0

    async def post(session: aiohttp.ClientSession) -> None:
        nonlocal answered
        async with session.post(url + "/v1/completions", data=body,
                                headers={"Content-Type": "application/json"}) as resp:
            text = await resp.read()
        answered += resp.status == 200 and b"[DONE]" in text

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        t0 = perf_counter()
        for at in _offsets(schedule):
            await asyncio.sleep(t0 + at - perf_counter())
            tasks.append(asyncio.create_task(post(session)))
        await asyncio.gather(*tasks)
    return t0, answered


def run_naive(schedule: Schedule, url: str) -> Lag:
    t0, answered = run_coroutine(_naive(schedule, url), use_uvloop=True)
    return _lag("naive asyncio.sleep loop", url, _offsets(schedule), t0, answered)


def _offsets(schedule: Schedule) -> np.ndarray:
    return np.array([r.at_s for r in schedule.requests], dtype=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=150.0, help="requests per second")
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--output-tokens", type=int, default=3)
    parser.add_argument("--median-budget-ms", type=float, default=MEDIAN_BUDGET_MS)
    parser.add_argument("--early-budget-ms", type=float, default=EARLY_BUDGET_MS)
    args = parser.parse_args()

    pin = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
    ctx = mp.get_context("spawn")
    parent_end, child_end = ctx.Pipe()
    sink = ctx.Process(target=_sink_main, args=(child_end, SINK_CORE if pin else None),
                       daemon=True)
    sink.start()
    if pin:
        os.sched_setaffinity(0, {CLIENT_CORE})
    try:
        if not parent_end.poll(SINK_START_S):
            raise SystemExit(f"the sink did not start within {SINK_START_S:g} s")
        url = f"http://127.0.0.1:{parent_end.recv()}"
        schedule = build_schedule(fixed(32, args.output_tokens, rate_rps=args.rate,
                                        num_requests=args.requests, seed=args.seed))
        print(f"schedule: Poisson {args.rate:g} req/s, {args.requests} requests (seed "
              f"{args.seed}), {args.output_tokens}-token streams; "
              + (f"sink on core {SINK_CORE}, clients on core {CLIENT_CORE}" if pin
                 else "sink and clients share the cores"))
        base = run_naive(schedule, url)
        ours = [run_servefit(schedule, url, 1), run_servefit(schedule, url, 2)]
    finally:
        sink.kill()
        sink.join()
    print(f"{'lag at the sink (ms)':<30} {'median':>9} {'p99':>9} {'min':>9} {'answered':>10}")
    for lag in (base, *ours):
        print(lag.row())
    base_med, base_p99 = np.median(base.lag_ms), np.percentile(base.lag_ms, 99)
    for lag in ours:
        print(f"{lag.client} / {base.client}: median {np.median(lag.lag_ms) / base_med:.2f}x, "
              f"p99 {np.percentile(lag.lag_ms, 99) / base_p99:.2f}x (lower is better)")
    median_ms, early_ms = args.median_budget_ms, args.early_budget_ms
    missed = [lag.client for lag in ours
              if not (np.median(lag.lag_ms) < median_ms and lag.lag_ms.min() > -early_ms)]
    print(f"budget (median < {median_ms:g} ms, min > -{early_ms:g} ms): "
          + ("met" if not missed else "MISSED by " + ", ".join(missed)))
    if any(lag.answered != lag.scheduled for lag in (base, *ours)):
        print("void: a request was not answered")
        raise SystemExit(2)
    if missed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
