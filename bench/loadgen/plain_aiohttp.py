"""The baseline client of bench/loadgen_speed.sh: a plain aiohttp + uvloop + orjson loop.

What a competent engineer writes in an afternoon, one process, no storage: `concurrency` lanes
(or Poisson arrivals at `rate`, seed 0) each POST a streaming completion, read the SSE lines,
stamp the first and every content chunk, and at the end print the yardstick's baseline JSON
line. ServeFit's CLI is measured against it in the same run (issue 13's ratios).
Reads the yardstick's BENCH_* variables.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
from time import perf_counter

import aiohttp
import numpy as np
import orjson
import uvloop


def _ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p99": None}
    arr = np.asarray(values) * 1e3
    return {"mean": float(arr.mean()), "p99": float(np.percentile(arr, 99))}


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, out: dict) -> None:
    sent = perf_counter()
    stamps: list[float] = []
    async with session.post(url, data=body,
                            headers={"Content-Type": "application/json"}) as resp:
        async for line in resp.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            chunk = orjson.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                stamps.append(perf_counter())
    end = perf_counter()
    if stamps:
        out["ttft"].append(stamps[0] - sent)
        out["itl"].extend(b - a for a, b in itertools.pairwise(stamps))
        if len(stamps) > 1:
            out["tpot"].append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
        out["tokens"] += len(stamps)
        out["done"] += 1
        out["last"] = end
    else:
        out["errors"] += 1


async def main() -> None:
    env = os.environ
    url = env["BENCH_URL"].rstrip("/") + "/v1/completions"
    duration = float(env["BENCH_DURATION"])
    body = orjson.dumps({"model": "stub-model", "prompt": [1] * int(env["BENCH_PROMPT_TOKENS"]),
                         "max_tokens": int(env["BENCH_MAX_TOKENS"]), "stream": True,
                         "ignore_eos": True})
    out: dict = {"ttft": [], "itl": [], "tpot": [], "tokens": 0, "done": 0, "errors": 0,
                 "last": 0.0}
    concurrency = int(env.get("BENCH_CONCURRENCY", "64"))
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        t0 = perf_counter()
        end = t0 + duration
        if env.get("BENCH_MODE") == "poisson":
            rng, rate, tasks = random.Random(0), float(env["BENCH_RATE"]), set()
            at = t0
            while at < end:
                at += rng.expovariate(rate)
                await asyncio.sleep(max(0.0, at - perf_counter()))
                task = asyncio.create_task(_one(session, url, body, out))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
        else:
            async def lane() -> None:
                while perf_counter() < end:
                    await _one(session, url, body, out)
            await asyncio.gather(*(lane() for _ in range(concurrency)))
    span = max(out["last"] - t0, 1e-9)
    print(json.dumps({"client": "plain-aiohttp", "completed": out["done"],
                      "errors": out["errors"], "req_per_s": out["done"] / span,
                      "tokens_per_s": out["tokens"] / span, "ttft_ms": _ms(out["ttft"]),
                      "itl_ms": _ms(out["itl"]), "tpot_ms": _ms(out["tpot"])}))


if __name__ == "__main__":
    uvloop.run(main())
