"""The `local` launcher on the real vLLM CPU server (tiny model, float32, --enforce-eager):
readiness passes, one streaming request succeeds, and nothing is left after the block.
Slow: ≈ 30-60 s.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import pytest

from runners.load.client import send
from runners.load.schemas import RequestResult, RequestSpec
from runners.server.launch import launched
from runners.server.process_group import group_alive
from tests.runners.conftest import vllm_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _send_one(url: str, model: str) -> RequestResult:
    async def go() -> RequestResult:
        async with aiohttp.ClientSession() as session:
            spec = RequestSpec(model=model, prompt="the model server", max_tokens=8)
            return await send(session, url, spec, timeout_s=60)

    return asyncio.run(go())


def test_local_launch_of_real_vllm(tiny_model_dir, tmp_path):
    spec = vllm_spec(tiny_model_dir, tmp_path)
    with launched(spec) as ep:
        assert ep.pid is not None and group_alive(ep.pid)
        assert ep.command[0] == str(spec.venv / "bin" / "python")  # type: ignore[operator]
        assert "{port}" not in ep.command and ep.url.endswith(ep.command[ep.command.index(
            "--port") + 1])
        result = _send_one(ep.url, ep.served_model_name)
        assert result.success, result.error
        assert result.output_tokens == 8
        print(f"\nvLLM ready in {ep.ready_s:.1f} s; request TTFT "
              f"{result.ttft_s * 1e3:.1f} ms", file=sys.stderr)  # type: ignore[operator]
    assert not group_alive(ep.pid), "vLLM processes left behind"
