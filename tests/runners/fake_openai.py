"""A small OpenAI-compatible streaming server for bench tests (no model, real HTTP).

It serves what a benchmark touches: `/v1/models`, `/tokenize`, streaming `/v1/completions`
(one token per chunk, `ttft_s` then `tpot_s` apart, with the usage chunk), `/health` and a
vLLM-named `/metrics` whose gauges and prefix-cache counters follow its real state. At most
`max_running` requests generate at once; the rest wait (so throughput saturates, as an
engine's does). `die()` closes the listening socket and every connection.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

BLOCK = 16


class FakeOpenAI:
    def __init__(self, *, ttft_s: float = 0.02, tpot_s: float = 0.01, max_running: int = 64,
                 model: str = "fake", port: int = 0) -> None:
        self.ttft_s, self.tpot_s, self.model = ttft_s, tpot_s, model
        self.max_running = max_running
        self.waiting = self.running = 0
        self.queries = self.hits = 0
        # Speculative decoding's counters (vLLM names): None = the engine does not speculate;
        # else k draft tokens per step with `spec_accepted` of them accepted every step.
        self.spec_k: int | None = None
        self.spec_accepted = 0
        self.drafts = self.draft_tokens = self.accepted_tokens = 0
        self.seen_blocks: set[tuple[int, ...]] = set()
        self.bodies: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = port

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._sem = asyncio.Semaphore(self.max_running)
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def die(self) -> None:
        """Stop serving at once (connections refused or reset from now on)."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None

    def stop(self) -> None:
        self.die()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- handlers -------------------------------------------------------------------------------

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt") or body["messages"][0]["content"]
        return web.json_response({"tokens": [ord(c) for c in text], "count": len(text)})

    async def _metrics(self, _request: web.Request) -> web.Response:
        lines = [
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{model_name="{self.model}"}} {self.waiting}',
            f'vllm:num_requests_running{{model_name="{self.model}"}} {self.running}',
            f'vllm:kv_cache_usage_perc{{model_name="{self.model}"}} {self.running / 100}',
            f'vllm:prefix_cache_queries_total{{model_name="{self.model}"}} {self.queries}',
            f'vllm:prefix_cache_hits_total{{model_name="{self.model}"}} {self.hits}',
        ]
        if self.spec_k is not None:
            lines += [
                f'vllm:spec_decode_num_drafts_total{{model_name="{self.model}"}} {self.drafts}',
                f'vllm:spec_decode_num_draft_tokens_total{{model_name="{self.model}"}} '
                f"{self.draft_tokens}",
                f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{self.model}"}} '
                f"{self.accepted_tokens}",
            ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _count_prefix(self, prompt: list[int]) -> None:
        """Leading run of full blocks already seen = hits (as vLLM counts), then remember all."""
        blocks = [tuple(prompt[: (k + 1) * BLOCK]) for k in range(len(prompt) // BLOCK)]
        lead = 0
        for b in blocks:
            if b not in self.seen_blocks:
                break
            lead += 1
        self.queries += len(prompt)
        self.hits += lead * BLOCK
        self.seen_blocks.update(blocks)

    def _count_speculation(self, n: int) -> None:
        """n output tokens at 1 + spec_accepted tokens per verify step (the first token comes
        from the prefill, as in vLLM)."""
        if self.spec_k is None or n <= 1:
            return
        steps = -(-(n - 1) // (1 + self.spec_accepted))
        self.drafts += steps
        self.draft_tokens += self.spec_k * steps
        self.accepted_tokens += self.spec_accepted * steps

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        prompt = body["prompt"] if isinstance(body["prompt"], list) else list(body["prompt"])
        n = int(body["max_tokens"])
        self.waiting += 1
        async with self._sem:
            self.waiting -= 1
            self.running += 1
            try:
                self._count_prefix(prompt)
                self._count_speculation(n)
                return await self._stream(request, len(prompt), n)
            except ConnectionResetError:  # the client went away (a stopped run): not an error
                return web.Response(status=499)
            finally:
                self.running -= 1

    async def _stream(self, request: web.Request, n_prompt: int, n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(self.ttft_s)
        for i in range(n):
            if i:
                await asyncio.sleep(self.tpot_s)
            chunk = {"choices": [{"index": 0, "text": f"t{i} ", "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": n,
                                          "total_tokens": n_prompt + n}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp


def main(argv: list[str]) -> None:
    """Stand in for an engine's server command: `… --port P` serves until killed, as the model
    its arguments name (--served-model-name, --model-path, or the first `org/name`; default
    "fake"). Also the entrypoint of the stub engine image the Docker test builds
    (tests/docker), which receives an engine's launch arguments."""
    import signal
    import time

    # As a container's PID 1 a process ignores SIGTERM unless it handles it: `docker stop`
    # would wait out its grace period.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    model = next((argv[argv.index(flag) + 1] for flag in ("--served-model-name", "--model-path")
                  if flag in argv), None) or next((a for a in argv[1:] if "/" in a
                                                  and not a.startswith("-")), "fake")
    server = FakeOpenAI(port=int(argv[argv.index("--port") + 1]), model=model).start()
    print(f"fake engine serving on {server.url}", flush=True)
    while True:
        time.sleep(3600)


def write_stand_in(bin_dir: Path, command: str) -> Path:
    """An executable `bin_dir/command` that serves this fake engine (`main`), standing in for
    an engine's server command in an --engine-venv's bin/."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    script = bin_dir / command
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
                      "from tests.runners.fake_openai import main\nmain(sys.argv)\n")
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    main(sys.argv)
