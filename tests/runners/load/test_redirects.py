"""The tool talks to the server it was given, never to a host a reply names: a 307 from the
endpoint is its answer for /v1/models, /tokenize, /health and the completions themselves
(it was followed to another host). The "other host" here is a second loopback server that
counts what reaches it."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from core.errors import RunnerError
from runners.load.client import get_status, send
from runners.load.prompts import _post_json, served_model
from runners.load.schemas import RequestSpec


async def _start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _pair() -> tuple[list[web.AppRunner], str, list[str]]:
    """(runners, the endpoint that redirects everything, the paths the other host saw)."""
    seen: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"data": [{"id": "stolen"}], "tokens": [1]})

    other = web.Application()
    other.router.add_route("*", "/{tail:.*}", elsewhere)
    other_runner, other_url = await _start(other)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(other_url + request.path)

    endpoint = web.Application()
    endpoint.router.add_route("*", "/{tail:.*}", redirect)
    endpoint_runner, endpoint_url = await _start(endpoint)
    return [endpoint_runner, other_runner], endpoint_url, seen


def test_no_request_follows_a_redirect_to_another_host():
    async def main() -> tuple[list[str], dict[str, object]]:
        runners, url, seen = await _pair()
        got: dict[str, object] = {}
        try:
            async with aiohttp.ClientSession() as session:
                with pytest.raises(RunnerError, match="answered HTTP 307"):
                    await served_model(session, url + "/v1")
                with pytest.raises(RunnerError, match="answered HTTP 307"):
                    await _post_json(session, url + "/tokenize", {"prompt": "hi"})
                result = await send(session, url + "/v1/completions",
                                    RequestSpec(model="m", prompt="hi", max_tokens=2),
                                    timeout_s=10)
                got["send"] = (result.success, result.error)
            got["health"] = await asyncio.to_thread(get_status, url + "/health", timeout_s=10)
        finally:
            for runner in runners:
                await runner.cleanup()
        return seen, got

    seen, got = asyncio.run(main())
    assert seen == []  # nothing reached the other host
    assert got["health"] == 307
    success, error = got["send"]  # type: ignore[misc]
    assert success is False and "307" in str(error)
