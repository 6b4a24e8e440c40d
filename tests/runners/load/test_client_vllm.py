"""End to end against the real vLLM CPU server (../shared/reference/vllm_cpu.md): the tiny
model and the server come from the `vllm_url` fixture in conftest.py (built at test time,
launched by runners.server.launch on a free port, torn down with no orphan). Slow: ≈ 40 s.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import pytest

from runners.load.client import send
from runners.load.schemas import RequestResult, RequestSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MAX_TOKENS = 16


def _run(url: str, specs: list[RequestSpec]) -> list[RequestResult]:
    async def go() -> list[RequestResult]:
        async with aiohttp.ClientSession() as session:
            return list(await asyncio.gather(
                *(send(session, url, s, timeout_s=120) for s in specs)))

    return asyncio.run(go())


def _check_ok(r: RequestResult) -> None:
    assert r.success, r.error
    assert r.output_tokens == MAX_TOKENS  # from the usage chunk, forced by ignore_eos
    assert r.prompt_tokens and r.prompt_tokens > 0
    assert r.ttft_s is not None and r.e2e_s is not None and r.tpot_s is not None
    # <=: on a busy machine every token can arrive in one read, stamped alike (seen in CI)
    assert 0 < r.ttft_s <= r.e2e_s <= r.end_at_s - r.sent_at_s
    assert r.chunk_times_s == sorted(r.chunk_times_s)
    assert len(r.itl_s) >= 1
    assert abs((r.e2e_s - r.ttft_s) - sum(r.itl_s)) < 1e-9


def test_completions_text_and_token_ids(vllm_url):
    specs = [RequestSpec(model="tiny", prompt=f"the model server number {i}",
                         max_tokens=MAX_TOKENS) for i in range(3)]
    specs.append(RequestSpec(model="tiny", prompt=list(range(10, 60)), max_tokens=MAX_TOKENS))
    results = _run(vllm_url, specs)
    for r in results:
        _check_ok(r)
    assert results[-1].prompt_tokens == 50
    print("completions", [(round(r.ttft_s * 1e3, 1), round(r.e2e_s * 1e3, 1),
                           len(r.chunk_times_s)) for r in results], file=sys.stderr)


def test_chat(vllm_url):
    specs = [RequestSpec(model="tiny", prompt=f"hello {i}", max_tokens=MAX_TOKENS, api="chat")
             for i in range(3)]
    results = _run(vllm_url, specs)
    for r in results:
        _check_ok(r)
    print("chat", [(round(r.ttft_s * 1e3, 1), round(r.e2e_s * 1e3, 1), len(r.chunk_times_s))
                   for r in results], file=sys.stderr)


def test_bad_model_name_is_a_failure_row(vllm_url):
    (r,) = _run(vllm_url, [RequestSpec(model="nope", prompt="hi", max_tokens=4)])
    assert not r.success and r.error_kind == "http" and r.http_status == 404
    assert "nope" in r.error and "\n" not in r.error
