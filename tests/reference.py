"""Independent reference computations of the profile figures (numpy/pandas, plain Python).

Written from DESIGN §2.2's definitions without using ServeFit's code, so tests compare two
implementations. Inputs are raw columns as read from the original files.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"


def order(t: np.ndarray | None, n: int) -> np.ndarray:
    """Arrival order: by time, ties (and untimed traces) by source row."""
    if t is None:
        return np.arange(n)
    return np.argsort(t, kind="stable")


def timing(t: np.ndarray) -> dict[str, float]:
    t = np.sort(t - t.min(), kind="stable")
    n = len(t)
    duration = t[-1] - t[0]
    mean = n / duration
    peak1 = np.bincount(np.floor(t / 1.0).astype(np.int64)).max()
    peak60 = np.bincount(np.floor(t / 60.0).astype(np.int64)).max() / 60.0
    gaps = np.diff(t)
    return {
        "n_requests": n,
        "duration_s": duration,
        "mean_qps": mean,
        "peak_qps_1s": float(peak1),
        "peak_qps_60s": peak60,
        "peak_to_mean_1s": peak1 / mean,
        "peak_to_mean_60s": peak60 / mean,
        "interarrival_cv": gaps.std(ddof=0) / gaps.mean(),
    }


def lengths(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, dtype=float)
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"p50": p50, "p90": p90, "p99": p99, "mean": x.mean(), "max": x.max(), "min": x.min()}


def multi_turn_share(sessions: pd.Series) -> float | None:
    if sessions.notna().sum() == 0:
        return None
    counts = sessions.map(sessions.value_counts())
    return float((counts >= 2).sum() / len(sessions))


def infinite_hits(blocks: list[list]) -> int:
    """Blocks already seen in an earlier request (repeats inside one request don't count)."""
    seen: set = set()
    hits = 0
    for req in blocks:
        hits += sum(b in seen for b in req)
        seen.update(req)
    return hits


def lru_hits(blocks: list[list], capacity: int) -> int:
    """vLLM/SGLang prefix-cache LRU written the obvious way: leading-run hits, then every
    block inserted or refreshed, last block first, evicting the least recently used."""
    cache: OrderedDict = OrderedDict()  # last = most recently used
    hits = 0
    for req in blocks:
        for b in req:
            if b not in cache:
                break
            hits += 1
        for b in reversed(req):
            if b in cache:
                cache.move_to_end(b)
            else:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[b] = None
    return hits


def infinite_reuse(blocks: list[list]) -> float:
    return infinite_hits(blocks) / sum(len(r) for r in blocks)


def lru_reuse(blocks: list[list], capacity: int) -> float:
    return lru_hits(blocks, capacity) / sum(len(r) for r in blocks)


def prefix_ids(text: str, width: int) -> list[bytes]:
    """Block identity = SHA-1 of the whole prefix up to the block's end (partial last too)."""
    digest = hashlib.sha1()
    out = []
    for j in range(0, len(text), width):
        digest.update(text[j : j + width].encode("utf-8", "surrogatepass"))
        out.append(digest.copy().digest())
    return out


def sharegpt_requests(conversations: list[dict]) -> pd.DataFrame:
    """ShareGPT -> requests per the documented rule: prompt = conversation so far."""
    roles = {"human": "user", "gpt": "assistant"}
    rows = []
    for conv in conversations:
        turns = conv["conversations"]
        prompt = ""
        for i, turn in enumerate(turns):
            role = turn.get("from", "")
            prompt += f"{roles.get(role, role)}: {turn.get('value') or ''}\n"
            if role.lower() not in ("human", "user"):
                continue
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            answered = nxt is not None and nxt.get("from", "").lower() not in ("human", "user")
            reply = (nxt.get("value") or "") if answered else ""
            rows.append({
                "session": conv["id"],
                "input": math.ceil(len(prompt) / 4),
                "output": math.ceil(len(reply) / 4) if answered else 0,
                "blocks": prefix_ids(prompt, 64),
            })
    return pd.DataFrame(rows)
