"""A real OpenAI-style streaming server for the load-generator tests (aiohttp, own thread).

It answers `max_tokens` content chunks after `ttft_s`, `itl_s` apart, then the usage chunk
(prompt tokens: the id list's length, or its tokenizer's count for text) and `[DONE]`. It
records what it saw: receive time (the same perf_counter clock as the client), each body, and
the most requests in flight. `/v1/models` and `/tokenize` (with a real `tokenizers` tokenizer
when one is given) answer as vLLM's do.
"""

from __future__ import annotations

import asyncio
import json
import threading
from time import perf_counter
from typing import Any

from aiohttp import web

CHAT_OPEN, CHAT_CLOSE = "<|user|>", "<|assistant|>"


class LoadServer:
    """Start with `.start()`, stop with `.stop()`; `reset()` clears the records."""

    def __init__(self, *, ttft_s: float = 0.0, itl_s: float = 0.0, tokenizer: Any = None,
                 model: str = "test-model") -> None:
        self.ttft_s, self.itl_s, self.tokenizer, self.model = ttft_s, itl_s, tokenizer, model
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.tokenize_calls = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def reset(self) -> None:
        self.received, self.max_inflight, self.tokenize_calls = [], 0, 0

    def count(self, body: dict[str, Any]) -> int:
        if "messages" in body:
            text = CHAT_OPEN + body["messages"][0]["content"] + CHAT_CLOSE
            return len(self.tokenizer.encode(text, add_special_tokens=False).ids)
        prompt = body["prompt"]
        if isinstance(prompt, list):
            return len(prompt)
        return len(self.tokenizer.encode(prompt, add_special_tokens=False).ids)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        now = perf_counter()
        body = await request.json()
        self.received.append((now, body))
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            return await self._stream(request, body)
        finally:
            self.inflight -= 1

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chat = "messages" in body
        n = int(body["max_tokens"])
        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        for i in range(n):
            if i and self.itl_s:
                await asyncio.sleep(self.itl_s)
            choice = {"index": 0, "delta": {"content": " t"}} if chat else {"index": 0,
                                                                            "text": " t"}
            await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        usage = {"prompt_tokens": self.count(body), "completion_tokens": n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
                         + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.tokenize_calls += 1
        body = await request.json()
        if self.tokenizer is None:
            return web.json_response({"error": "no tokenizer"}, status=404)
        if "messages" in body:
            text = CHAT_OPEN + body["messages"][0]["content"] + CHAT_CLOSE
        else:
            text = body["prompt"]
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": 4096})

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._started.set()
        self._loop.run_forever()

    def start(self) -> LoadServer:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
