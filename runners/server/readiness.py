"""The wait until a launched server serves: poll its health path, then one 1-token streaming
completion, until both answer, the process or container dies, or the bound passes. The probe
(paths, model name, completion body) comes from the engine's plug-in.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp

from engines.base import ReadinessProbe
from runners.load.client import get_status, send
from runners.load.schemas import RequestSpec
from runners.server import docker_container
from runners.server.launch_spec import LaunchSpec
from runners.server.launch_state import Running, failure

_HEALTH_TIMEOUT_S = 2.0
_T = TypeVar("_T")


def wait_ready(spec: LaunchSpec, running: Running, base: str, probe: ReadinessProbe) -> None:
    """Poll health, then one tiny completion, until ready, dead, or past the bound."""
    deadline = time.monotonic() + spec.ready_timeout_s
    last = "no health answer yet"
    while True:
        proc = running.proc
        if proc is not None and proc.poll() is not None:
            raise failure(f"server exited with code {proc.returncode} before ready "
                          f"(last probe: {last})", running)
        gone = docker_container.exited(running.handle) if running.handle is not None else None
        if gone:
            raise failure(f"{gone} before ready (last probe: {last})", running)
        last = _health(base + probe.health_path)
        running.status(f"waiting for the engine at {base} ({last or 'healthy'})")
        if not last and spec.check_completion:
            last = _completion(base, probe, timeout_s=max(1.0, deadline - time.monotonic()))
        if not last:
            return
        if time.monotonic() >= deadline:
            raise failure(f"server not ready after {spec.ready_timeout_s:g} s at {base} "
                          f"(last probe: {last})", running)
        time.sleep(spec.poll_interval_s)


def _health(url: str) -> str:
    """'' when GET `url` answers 200, else why not."""
    try:
        status = get_status(url, timeout_s=_HEALTH_TIMEOUT_S)
        return "" if status == 200 else f"health HTTP {status}"
    except (OSError, ValueError, http.client.HTTPException) as exc:  # incl. non-HTTP bytes
        return f"health: {type(exc).__name__}: {exc}"


def _completion(base: str, probe: ReadinessProbe, *, timeout_s: float) -> str:
    """'' when one 1-token streaming completion succeeds, else its error."""
    prompt = probe.completion_body.get("prompt", "Hello")
    spec = RequestSpec(model=probe.served_model_name, prompt=prompt, max_tokens=1)

    async def go() -> str:
        async with aiohttp.ClientSession() as session:
            result = await send(session, base + probe.completion_path, spec,
                                timeout_s=min(timeout_s, 60.0))
        return "" if result.success else f"completion: {result.error}"

    return _run_coroutine(go())


def _run_coroutine(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from sync code, even if this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(asyncio.run(coro))
        except BaseException as exc:  # handed back to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]
