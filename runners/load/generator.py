"""The load generator: send a `Schedule` to a server, many requests in flight, and collect results.

One event loop per process; open-loop requests go out at their offsets, closed-loop lanes keep
`concurrency` requests in flight. Bodies are built just in time from pre-encoded pieces (orjson,
no validation on the hot path) and sent by the raw HTTP/1.1 transport (`runners.load.rawhttp`, for
`http://`) or by `runners.load.client.send_body` over one aiohttp session; both time a stream the
same way (`client.SSEFeed`). The raw transport opens the run's connections before the clock
starts (one per concurrency slot) and stamps a request's send at its write, so neither a
request's TTFT nor the first wave's send times carry TCP connection setup.
`workers > 1` splits the schedule over processes (index `i` goes to worker `i % workers`), each
with its own loop, sharing one start instant (perf_counter is the system monotonic clock).

A stop event ends a run early: nothing more is sent, in-flight requests are cancelled and kept
as failures with `error_kind="cancelled"`, and every finished result is kept.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import aiohttp

from core.errors import RunnerError
from core.loop import run_coroutine, run_outside_loop, watch_stop
from runners.load import prompts
from runners.load.failures import one_line
from runners.load.process import (
    LoadOptions,
    OnResult,
    Prepared,
    Run,
    WorkloadOutcome,
    client_session,
    outcome,
)
from runners.load.schedule import Schedule
from runners.load.schemas import MANAGED_KEYS

__all__ = ["prepare", "run_workload",
           "run_workload_sync"]
TEXT_POOL = 256  # distinct calibrated text prompts per length (each costs /tokenize calls)
# Bound on each call made while preparing (model list, /tokenize), and --timeout-s when lower:
# these answer in milliseconds on a working server, so a silent one fails the run early.
PREPARE_TIMEOUT_S = 30.0


def _uses_text(options: LoadOptions) -> bool:
    return options.prompt_mode == "text" or (
        options.prompt_mode == "auto" and options.api == "chat")


async def prepare(schedule: Schedule, options: LoadOptions) -> Prepared:
    """Ask the server what the prompts need: the model name, the id range or text prompts."""
    if options.api == "chat" and options.prompt_mode == "token_ids":
        raise RunnerError("token-id prompts need api='completions'; chat takes text")
    clash = MANAGED_KEYS & options.extra_body.keys()
    if clash:
        raise RunnerError(f"extra_body may not set {sorted(clash)}")
    wait_s = min(options.timeout_s, PREPARE_TIMEOUT_S)
    async with client_session(4, timeout_s=wait_s) as session:
        try:
            model = options.model or await prompts.served_model(session, options.url)
            if _uses_text(options):
                return Prepared(model=model, texts=await _texts(session, schedule, options, model))
            high = options.vocab_size or await prompts.id_range(session, options.url, model)
        except TimeoutError:  # aiohttp's timeouts are TimeoutErrors too
            raise RunnerError(f"{options.url} did not answer within {wait_s:g} s while asked "
                              "for its model or prompts") from None
        except aiohttp.ClientConnectorError as exc:
            raise RunnerError(f"cannot connect to {options.url} ({_refusal(exc)}): start the "
                              "server first (e.g. the exported serve.sh), or check the URL "
                              "and port") from None
        except aiohttp.ClientError as exc:
            raise RunnerError(f"cannot reach {options.url}: {type(exc).__name__}: "
                              f"{one_line(str(exc))}") from None
    return Prepared(model=model, high_id=high)


def _refusal(exc: aiohttp.ClientConnectorError) -> str:
    """The operating system's words for a failed connect ('Connection refused'), without
    aiohttp's 'ssl:default [...]' wrapping."""
    cause = exc.os_error
    if cause is None:
        return "no connection"
    if cause.errno and cause.errno > 0:  # asyncio's strerror is 'Connect call failed (...)'
        return os.strerror(cause.errno)
    return one_line(cause.strerror or str(cause))


async def _texts(session: Any, schedule: Schedule, options: LoadOptions,
                 model: str) -> dict[int, list[str]]:
    maker = prompts.TextPrompts(session, options.url, model, chat=options.api == "chat",
                                seed=options.seed)
    counts: dict[int, int] = {}
    for r in schedule.requests:
        counts[r.input_tokens] = min(TEXT_POOL, counts.get(r.input_tokens, 0) + 1)
    return {n: [await maker.prompt(k, n) for k in range(c)] for n, c in counts.items()}


async def run_workload(schedule: Schedule, options: LoadOptions, *,
                       on_result: OnResult | None = None,
                       stop: asyncio.Event | None = None) -> WorkloadOutcome:
    """Send `schedule` to the server; return every sent request's result.

    `on_result(index, result)` is called as each request finishes (in this process's loop).
    Raises RunnerError when the server cannot be asked what prompts need; a request never
    raises. An exception from `on_result` stops the run and is re-raised after it.
    """
    if not schedule.requests:
        raise RunnerError("the schedule holds no requests")
    prep = await prepare(schedule, options)
    if options.workers > 1 or options.isolate:
        from runners.load.workers import run_processes

        return await run_processes(schedule, options, prep, on_result, stop)
    run = Run(schedule, options, prep, on_result, (0, 1))
    await run.run(stop)
    if run.callback_error is not None:
        raise run.callback_error
    interrupted = stop is not None and stop.is_set()
    return outcome(schedule, run.results, run.t0, interrupted)


def run_workload_sync(schedule: Schedule, options: LoadOptions, *,
                      on_result: OnResult | None = None,
                      stop: threading.Event | None = None) -> WorkloadOutcome:
    """`run_workload` from synchronous code (CLI, Streamlit): its own loop, in a thread when
    the caller's thread already runs one. `stop` is a threading.Event here."""
    def main() -> WorkloadOutcome:
        return run_coroutine(_sync_main(schedule, options, on_result, stop),
                             use_uvloop=options.use_uvloop)

    return run_outside_loop(main)


async def _sync_main(schedule: Schedule, options: LoadOptions, on_result: OnResult | None,
                     stop: threading.Event | None) -> WorkloadOutcome:
    if stop is None:
        return await run_workload(schedule, options, on_result=on_result)
    event = asyncio.Event()
    watcher = asyncio.create_task(watch_stop(stop, event))
    try:
        return await run_workload(schedule, options, on_result=on_result, stop=event)
    finally:
        watcher.cancel()
