"""`python -m app predict`: DESIGN §2.4 JSON keys, the model's figures in ms, usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recommender.catalog import get_gpu, get_model
from recommender.perf import predict

ROOT = Path(__file__).resolve().parents[2]
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "predict", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)


def test_json_keys_and_units():
    out = run("--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu",
              "H100-SXM", "--isl", "1000", "--osl", "200", "--concurrency", "32", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert {"output_throughput_tok_s", "total_throughput_tok_s", "request_throughput_rps",
            *LATENCY_KEYS} <= set(got)
    for key in LATENCY_KEYS:
        assert set(got[key]) == {"mean", "p50", "p90", "p99"}
    direct = predict("vllm", get_model("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("H100-SXM"),
                     isl=1000, osl=200, concurrency=32)
    assert got["ttft_ms"]["mean"] == pytest.approx(direct.ttft_s * 1e3)
    assert got["output_throughput_tok_s"] == pytest.approx(direct.output_throughput_tok_s)
    assert got["total_throughput_tok_s"] == pytest.approx(
        direct.request_throughput_rps * 1200, rel=1e-9)


@pytest.mark.parametrize("args", [
    ["--isl", "0", "--osl", "10", "--concurrency", "1"],
    ["--isl", "10", "--osl", "10", "--offline"],
    ["--isl", "10", "--osl", "10", "--concurrency", "1", "--gpu", "TPU"],
])
def test_usage_errors_are_one_line(args):
    base = ["--engine", "vllm", "--model", "Qwen/Qwen3-8B", "--gpu", "H100-SXM"]
    out = run(*base, *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
