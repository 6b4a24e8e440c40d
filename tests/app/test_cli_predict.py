"""`python -m app predict`: DESIGN §2.4 JSON keys, simulated tails in ms, usage errors.

The JSON test and the usage errors run a real `python -m app` process (start-up, exit status,
streams); the others call the CLI in this process (the `cli` fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.load import fixed
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.sim.predict import simulate_load

ROOT = Path(__file__).resolve().parents[2]
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
BASE = ["--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-SXM"]


def process(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "predict", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)


@pytest.fixture
def run(cli, tmp_path):
    """`python -m app predict ARGS` in this process."""
    return lambda *args: cli("predict", *args, cwd=tmp_path)


def test_json_keys_units_and_tails_from_the_simulator():
    out = process(*BASE, "--isl", "1000", "--osl", "200", "--concurrency", "32", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert {"output_throughput_tok_s", "total_throughput_tok_s", "request_throughput_rps",
            *LATENCY_KEYS} <= set(got)
    for key in LATENCY_KEYS:
        assert {"mean", "p50", "p90", "p99"} <= set(got[key])
        assert got[key]["p50"] <= got[key]["p90"] <= got[key]["p99"]
    model = get_model("meta-llama/Llama-3.1-8B-Instruct")
    sim = simulate_load(EngineConfig(engine="vllm", model=model.name, weight_quantization="none"),
                        model,
                        get_gpu("H100-SXM"), fixed(1000, 200, concurrency=32))
    assert got["ttft_ms"]["p99"] == pytest.approx(sim.ttft_s.p99 * 1e3)
    assert got["e2e_ms"]["mean"] == pytest.approx(sim.e2e_s.mean * 1e3)
    assert got["output_throughput_tok_s"] == pytest.approx(sim.output_throughput_tok_s)
    # Identities of a fixed-length load: total = requests/s x (isl + osl), output x 200.
    assert got["total_throughput_tok_s"] == pytest.approx(got["request_throughput_rps"] * 1200)
    assert got["output_throughput_tok_s"] == pytest.approx(got["request_throughput_rps"] * 200)
    assert got["requests"] == 320  # 10 per user by default


def test_rate_mode_is_seeded_and_offline_counts_requests(run):
    args = [*BASE, "--isl", "500", "--osl", "100", "--json"]
    a = json.loads(run(*args, "--rate", "4", "--num-requests", "300").stdout)
    b = json.loads(run(*args, "--rate", "4", "--num-requests", "300").stdout)
    c = json.loads(run(*args, "--rate", "4", "--num-requests", "300", "--seed", "7").stdout)
    assert a == b and a["ttft_ms"] != c["ttft_ms"]
    # Far below capacity, an open loop completes what it is offered: about 4 req/s.
    assert a["request_throughput_rps"] == pytest.approx(4.0, rel=0.15)
    off = json.loads(run(*args, "--offline", "--num-requests", "500").stdout)
    assert off["requests"] == 500 and off["mode"] == "offline"


def test_sharegpt_lengths_spread_e2e_like_the_dataset(run):
    # One user: each request runs alone, so its E2E follows its own output length. Fixed
    # lengths give one E2E; ShareGPT's lengths (scaled to the same means) spread it as the
    # dataset's outputs spread (p90/p50 of the bundled distribution, read here).
    args = [*BASE, "--isl", "500", "--osl", "200", "--concurrency", "1", "--num-requests",
            "400", "--json"]
    flat = json.loads(run(*args).stdout)
    drawn = json.loads(run(*args, "--lengths", "sharegpt").stdout)
    assert flat["e2e_ms"]["p90"] == pytest.approx(flat["e2e_ms"]["p50"], rel=0.02)
    with (ROOT / "data" / "calibration" / "sharegpt_lengths.csv").open() as fh:
        header = fh.readline().strip().split(",")
        col = header.index("output_tokens")
        outputs = sorted(int(line.split(",")[col]) for line in fh if line.strip())
    want = outputs[int(0.9 * len(outputs))] / outputs[len(outputs) // 2]
    got = drawn["e2e_ms"]["p90"] / drawn["e2e_ms"]["p50"]
    assert got == pytest.approx(want, rel=0.35)
    # the means are kept: output tokens/s ~ requests/s x 200
    assert drawn["output_throughput_tok_s"] == pytest.approx(
        drawn["request_throughput_rps"] * 200, rel=0.1)


def test_speculative_flags_lower_tpot_at_concurrency_1(run):
    args = [*BASE, "--isl", "500", "--osl", "200", "--concurrency", "1", "--json"]
    plain = json.loads(run(*args).stdout)
    # At a = 0.5 (given: the flags' effect, not the method's default, is under test).
    spec = json.loads(run(*args, "--speculative", "ngram", "--spec-tokens", "3",
                          "--spec-acceptance", "0.5").stdout)
    assert spec["tpot_ms"]["mean"] < 0.8 * plain["tpot_ms"]["mean"]


def test_engine_and_precision_choices_are_the_registries(run):
    # fp16 is a registered precision (served as unquantised weights, like bf16); sglang and
    # trtllm are registered engines.
    args = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-SXM", "--isl", "200",
            "--osl", "20", "--concurrency", "2", "--num-requests", "20", "--json"]
    fp16 = json.loads(run("--engine", "vllm", *args, "--precision", "fp16").stdout)
    bf16 = json.loads(run("--engine", "vllm", *args, "--precision", "bf16").stdout)
    assert fp16 == bf16
    for engine in ("sglang", "trtllm"):
        assert run("--engine", engine, *args).returncode == 0
    assert run("--engine", "vllm", *args, "--precision", "fp3").returncode == 2


def test_text_view_shows_tails(run):
    out = run(*BASE, "--isl", "200", "--osl", "50", "--concurrency", "4")
    assert out.returncode == 0, out.stderr
    assert "p99" in out.stdout and "TTFT" in out.stdout and "req/s" in out.stdout


@pytest.mark.parametrize("args", [
    ["--isl", "0", "--osl", "10", "--concurrency", "1"],
    ["--isl", "10", "--osl", "10", "--offline"],
    ["--isl", "10", "--osl", "10", "--concurrency", "1", "--gpu", "TPU"],
    ["--isl", "10", "--osl", "10", "--rate", "0"],
    ["--isl", "10", "--osl", "10", "--concurrency", "1", "--speculative", "eagle"],
    ["--isl", "10", "--osl", "10", "--concurrency", "1", "--kv-cache-dtype", "fp5"],
    ["--isl", "10", "--osl", "10", "--concurrency", "1", "--max-num-seqs", "0"],
])
def test_usage_errors_are_one_line(args):
    base = ["--engine", "vllm", "--model", "Qwen/Qwen3-8B", "--gpu", "H100-SXM"]
    out = process(*base, *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize(("args", "flag"), [
    (["--isl", "100000000", "--osl", "10", "--concurrency", "1"], "--isl"),
    (["--isl", "10", "--osl", "10", "--rate", "-1"], "--rate"),
    (["--isl", "10", "--osl", "10", "--concurrency", "1", "--gpu-memory-fraction", "2"],
     "--gpu-memory-fraction"),
    (["--isl", "10", "--osl", "10", "--concurrency", "1", "--gpus", "100000"], "--gpus"),
    (["--isl", "10", "--osl", "10", "--concurrency", "1", "--engine-version", "0.10;rm"],
     "--engine-version"),
    (["--isl", "10", "--osl", "10", "--concurrency", "1", "--engine-version", "$(id)"],
     "--engine-version"),
    (["--isl", "10", "--osl", "10", "--concurrency", "1", "--slo-ttft-p95-ms", "-5"],
     "--slo-ttft-p95-ms"),
    (["--isl", "10", "--osl", "10", "--concurrency", "1", "--slo-tpot-p95-ms", "inf"],
     "--slo-tpot-p95-ms"),
])
def test_a_bad_value_is_named_as_the_flag_typed(run, args, flag):
    out = run("--engine", "vllm", "--model", "Qwen/Qwen3-8B", "--gpu", "H100-SXM", *args)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(f"python -m app: error: {flag}: ")


QWEN32_H100 = ["--engine", "vllm", "--model", "Qwen3-32B", "--gpu", "H100-SXM",
               "--isl", "1000", "--osl", "1000", "--concurrency", "8", "--num-requests", "40"]


def test_max_model_len_is_sized_to_the_workload_not_the_context(run):
    # Qwen3-32B BF16 (~65 GB) on one 80 GB H100 leaves a KV pool of ~19 k tokens: less than
    # its 40,960-token context, plenty for 1000+1000-token requests (issue 12: was refused).
    out = run(*QWEN32_H100, "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # 2000 tokens + 10 % = 2200, rounded up to a 1024 multiple.
    assert got["max_model_len"] == 3072
    assert got["kv_capacity_tokens"] < 40960
    assert got["refused"] == 0 and got["output_throughput_tok_s"] > 0
    sized = [w for w in got["warnings"] if "sized to the workload" in w]
    assert len(sized) == 1 and "3072" in sized[0]
    text = run(*QWEN32_H100)
    assert text.returncode == 0, text.stderr
    assert "max_model_len 3072" in text.stdout and "warning: max_model_len" in text.stdout


def test_given_max_model_len_is_kept_and_unwarned(run):
    got = json.loads(run(*QWEN32_H100, "--max-model-len", "8192", "--json").stdout)
    assert got["max_model_len"] == 8192
    assert not any("max_model_len" in w for w in got["warnings"])


def test_chunked_prefill_off_runs_whole_prompts_in_the_step_budget(run):
    # --no-chunked-prefill: a 4,000-token prompt must fit one step (with its output, should
    # it be recomputed), so a 2,048-token budget refuses it (one line) and 8,192 serves it;
    # --chunked-prefill splits it over 2,048-token steps.
    args = [*BASE, "--isl", "4000", "--osl", "100", "--offline", "--num-requests", "1"]
    out = run(*args, "--max-batched-tokens", "2048", "--no-chunked-prefill")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    whole = run(*args, "--max-batched-tokens", "8192", "--no-chunked-prefill", "--json")
    chunked = run(*args, "--max-batched-tokens", "2048", "--chunked-prefill", "--json")
    assert whole.returncode == chunked.returncode == 0, whole.stderr + chunked.stderr
    # one request alone: two 2,048-token steps take longer to its first token than one
    assert (json.loads(chunked.stdout)["ttft_ms"]["mean"]
            > json.loads(whole.stdout)["ttft_ms"]["mean"])


@pytest.mark.parametrize(("length", "says"), [
    ("1500", "exceeds max_model_len 1500"),  # shorter than one 2000-token request
    ("40960", "fewer than one max_model_len (40960)"),  # the context: the pool cannot hold it
    ("50000", "exceeds Qwen/Qwen3-32B's context of 40960"),
])
def test_a_max_model_len_that_cannot_serve_is_one_line(run, length, says):
    out = run(*QWEN32_H100, "--max-model-len", length)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert says in out.stderr


def test_a_rate_below_one_request_in_twelve_days_is_refused(run):
    # At --rate 1e-300 arrivals were 1e300 s apart and a 9 ms step vanished in the float
    # clock: predict answered TPOT 0 and E2E = TTFT for 200-token outputs.
    args = [*BASE, "--isl", "1000", "--osl", "200", "--json"]
    out = run(*args, "--rate", "1e-300")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--rate: Input should be greater than or equal to 0.000001" in out.stderr
    out = run(*args, "--rate", "1e-6", "--num-requests", "50")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # requests never overlap at this rate: each one's E2E is its TTFT + 199 token gaps
    assert got["tpot_ms"]["mean"] > 1.0
    assert got["e2e_ms"]["mean"] == pytest.approx(
        got["ttft_ms"]["mean"] + 199 * got["tpot_ms"]["mean"], rel=1e-3)


def test_goodput_counts_the_requests_within_the_slos_as_bench_does(run):
    """No SLO: every served request meets every SLO, so goodput is the request rate. A TPOT
    bound between the fastest and slowest request's TPOT counts the ones within it."""
    args = [*BASE, "--isl", "800", "--osl", "120", "--rate", "6", "--num-requests", "400",
            "--json"]
    free = json.loads(run(*args).stdout)
    assert free["goodput_rps"] == pytest.approx(free["request_throughput_rps"], rel=1e-12)
    tpot = free["tpot_ms"]
    bound = (tpot["p50"] + tpot["p90"]) / 2  # between the 50th and 90th percentile
    held = json.loads(run(*args, "--slo-tpot-p95-ms", str(bound)).stdout)
    share = held["goodput_rps"] / held["request_throughput_rps"]
    assert 0.5 <= share <= 0.9
    none = json.loads(run(*args, "--slo-ttft-p95-ms", "0.001").stdout)
    assert none["goodput_rps"] == 0.0


@pytest.mark.parametrize("extra", [["--spec-acceptance", "0.5"], ["--draft-model", "org/d"]])
def test_speculation_options_without_speculative_are_refused(run, extra):
    # they were silently ignored: the prediction was plain decoding
    result = run(*BASE, "--isl", "64", "--osl", "8", "--concurrency", "1", *extra)
    assert result.returncode == 2 and "need --speculative" in result.stderr
