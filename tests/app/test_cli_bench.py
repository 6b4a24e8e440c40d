"""`python -m app bench`: DESIGN §2.4 JSON keys (predict's names, ms) against a local streaming
server, the stored run behind them, and one-line exit-2 errors for bad input.

What needs a process runs one (`run`): the JSON run (start-up, the stored argv), two worker
processes, --launch local, Ctrl-C's exit 130, and one usage error. The other tests call the CLI
in this process (the `cli` fixture): the same command logic without a new interpreter each
time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from core.run_shape import Sweep
from profiler.workspace import Workspace
from runners.benchmark.stored_runs import list_runs, load_run
from tests.runners.fake_openai import FakeOpenAI, write_stand_in

ROOT = Path(__file__).resolve().parents[2]
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "bench", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
                          timeout=120)


@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI(ttft_s=0.02, tpot_s=0.01).start()
    yield server
    server.stop()


def test_json_keys_units_and_the_stored_run(fake, tmp_path):
    ws = tmp_path / "w.duckdb"
    out = run("--endpoint", fake.url, "--workload", "poisson", "--rate", "30",
              "--num-requests", "12", "--prompt-tokens", "32", "--output-tokens", "3",
              "--slo-ttft-p95-ms", "2000", "--workspace", str(ws), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert {"completed", "errors", "request_throughput_rps", "output_throughput_tok_s",
            "achieved_rate_rps", "goodput_rps", *LATENCY_KEYS} <= set(got)
    for key in LATENCY_KEYS:
        assert set(got[key]) == {"mean", "p50", "p90", "p95", "p99"}
    assert got["completed"] == 12 and got["errors"] == {} and got["status"] == "complete"
    record = load_run(Workspace(ws), got["run_id"])
    ttft = np.array([r.result.ttft_s for r in record.requests])
    assert got["ttft_ms"]["p95"] == pytest.approx(np.percentile(ttft, 95) * 1e3, rel=1e-9)
    assert got["ttft_ms"]["p50"] >= 20  # the server waits 20 ms before the first token
    assert record.info.argv[:2] == ["bench", "--endpoint"]


def test_text_output_two_workers_and_a_given_vocabulary(fake, tmp_path):
    before = len(fake.bodies)
    out = run("--endpoint", fake.url, "--workload", "concurrency", "--concurrency", "2",
              "--num-requests", "4", "--prompt-tokens", "16", "--output-tokens", "2",
              "--workers", "2", "--vocab-size", "5000", "--workspace", str(tmp_path / "w.duckdb"))
    assert out.returncode == 0, out.stderr
    assert "4 of 4 completed" in out.stdout and "TTFT ms" in out.stdout
    prompts = [b["prompt"] for b in fake.bodies[before:]]
    assert len(prompts) == 4 and all(len(p) == 16 and max(p) < 5000 for p in prompts)


def test_warmup_requests_are_sent_first_and_left_out(cli, fake, tmp_path):
    before = len(fake.bodies)
    out = cli("bench", "--endpoint", fake.url, "--workload", "concurrency", "--concurrency", "2",
              "--num-requests", "6", "--prompt-tokens", "16", "--output-tokens", "2",
              "--warmup-s", "0.4", "--workspace", str(tmp_path / "w.duckdb"), "--json",
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["warmup_requests"] > 0 and got["completed"] == 6
    assert len(fake.bodies) - before == got["warmup_requests"] + 6


@pytest.mark.parametrize(("args", "message"), [
    (["--workload", "poisson"], "one of the arguments --endpoint --launch is required"),
    (["--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "-1",
      "--prompt-tokens", "8", "--output-tokens", "2"], "--rate: Input should be greater"),
    (["--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "3"],
     "needs --prompt-tokens, --output-tokens"),
    (["--launch", "local", "--workload", "sweep"], "--launch needs --config"),
    (["--launch", "local", "--config", "missing.json", "--workload", "concurrency",
      "--concurrency", "1", "--num-requests", "1", "--prompt-tokens", "8",
      "--output-tokens", "2"], "missing.json: cannot read"),
    (["--endpoint", "http://127.0.0.1:9", "--workload", "trace"], "needs --trace"),
    (["--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "3",
      "--warmup-s", "-1"], "--warmup-s: Input should be greater than or equal to 0"),
    # sizes no client machine means (each used to run away with the host or never end)
    *[(["--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "3",
        flag, value], f"{flag}: Input should be {what}") for flag, value, what in [
        ("--num-requests", "1000000000", "less than or equal to 10000000"),
        ("--concurrency", "1000000000", "less than or equal to 100000"),
        ("--workers", "100000", "less than or equal to 64"),
        ("--duration-s", "1e9", "less than or equal to 604800"),
        ("--warmup-s", "inf", "a finite number"),
        ("--time-scale", "inf", "a finite number")]],
    (["--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "inf"],
     "--rate: Input should be a finite number"),
    (["--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "1e-300"],
     "--rate: Input should be greater than or equal to 0.000001"),
    # the Docker options, said in docker's words (issue 28, item 5)
    *[(["--launch", "docker", "--config", "missing.json", "--workload", "poisson",
        "--rate", "3", "--docker-gpus", gpus], f"--docker-gpus: '{gpus}': expected all, none, "
       "a count (2) or device=0,1") for gpus in ("0", "device=", "-1", "all,1", "gpu0")],
    (["--launch", "docker", "--config", "missing.json", "--workload", "poisson", "--rate",
      "3", "--pull", "sometimes"], "argument --pull: invalid choice"),
])
def test_bad_input_is_one_line_exit_2(cli, args, message, tmp_path):
    ws = tmp_path / "w.duckdb"
    # The first through a real process (argparse's own exit), the others in this process.
    in_process = args != ["--workload", "poisson"]
    out = (cli("bench", *args, "--workspace", str(ws), cwd=tmp_path) if in_process
           else run(*args, "--workspace", str(ws)))
    assert out.returncode == 2, out.stderr
    # The one line (argparse's own errors come after its usage text, as for every command).
    lines = out.stderr.strip().splitlines()
    assert message in lines[-1]
    assert len(lines) == 1 or lines[0].startswith("usage:")
    assert "Traceback" not in out.stderr
    assert not ws.exists()  # refused before anything was written


def test_unreachable_endpoint_is_one_line_and_stored_as_failed(cli, tmp_path):
    ws = tmp_path / "w.duckdb"
    out = cli("bench", "--endpoint", "http://127.0.0.1:9", "--workload", "poisson", "--rate", "5",
              "--num-requests", "3", "--prompt-tokens", "8", "--output-tokens", "2",
              "--workspace", str(ws), cwd=tmp_path)
    assert out.returncode == 2
    # the system's words, not aiohttp's 'ClientConnectorError ... ssl:default [...]'
    assert "cannot connect to http://127.0.0.1:9 (Connection refused): start the server" \
        in out.stderr
    assert "ssl:default" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    [info] = list_runs(Workspace(ws))
    assert info.status == "failed" and info.n_requests == 0


def test_launch_local_from_rec_json_with_engine_venv(tmp_path):
    """--launch local: rec.json → the plug-in's command, run from --engine-venv's bin/ (here a
    stand-in `vllm` that serves the fake engine), benchmarked, then torn down."""
    write_stand_in(tmp_path / "venv" / "bin", "vllm")
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"config": {"engine": "vllm", "model": "tiny-test"}}))
    ws = tmp_path / "w.duckdb"
    out = run("--launch", "local", "--config", str(rec), "--engine-venv", str(tmp_path / "venv"),
              "--log-dir", str(tmp_path / "logs"), "--workload", "concurrency",
              "--concurrency", "2", "--num-requests", "6", "--prompt-tokens", "16",
              "--output-tokens", "3", "--workspace", str(ws), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["completed"] == 6 and got["status"] == "complete"
    [log] = (tmp_path / "logs").iterdir()
    assert "fake engine serving" in log.read_text()
    info = load_run(Workspace(ws), got["run_id"]).info
    assert info.config["model"] == "tiny-test" and info.status == "complete"
    port = log.name.split("-")[2]  # vllm-local-PORT-STAMP.log
    with pytest.raises(urllib.error.URLError):  # the engine is gone
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def test_ctrl_c_stores_an_incomplete_run_and_exits_130(fake, tmp_path):
    ws = tmp_path / "w.duckdb"
    before = len(fake.bodies)  # the server is shared with the other tests of this module
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "bench", "--endpoint", fake.url, "--workload", "poisson",
         "--rate", "10", "--num-requests", "500", "--prompt-tokens", "16", "--output-tokens",
         "50", "--workspace", str(ws)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while len(fake.bodies) < before + 10 and time.monotonic() < deadline:  # requests are flowing
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "python -m app: interrupted"
    [info] = list_runs(Workspace(ws))
    kinds = [r.result.error_kind for r in load_run(Workspace(ws), info.run_id).requests]
    assert info.status == "incomplete" and 10 <= len(kinds) < 500
    assert kinds.count(None) >= 1 and set(kinds) <= {None, "cancelled"}


ROUND_TRIP = [
    {"endpoint": "http://127.0.0.1:9", "model": "m", "engine": "sglang", "workload": "sweep",
     "prompt_tokens": 16, "output_tokens": 4, "concurrency": 8, "num_requests": 12,
     "warmup_s": 0.3, "api": "chat"},
    {"launch": "docker", "config_path": "REC", "log_dir": "/tmp/logs",
     "model_cache_dir": "/models", "image": "my/vllm:dev", "docker_gpus": "device=0,2",
     "docker_network": "host", "pull": "never", "workload": "burst", "prompt_tokens": 100,
     "output_tokens": 10, "rate_rps": 0.7, "peak_rate_rps": 2.9000000000000004,
     "burst_s": 20.0, "duration_s": 60.0, "slo_ttft_p95_ms": 70.0, "slo_tpot_p95_ms": 50.0},
    {"launch": "local", "config_path": "REC", "engine_venv": "VENV", "workload": "poisson",
     "rate_rps": 3.3333333333333335, "duration_s": 12.5, "prompt_tokens": 8,
     "output_tokens": 2, "seed": 7, "workers": 2, "timeout_s": 30.0},
]


@pytest.mark.parametrize("fields", ROUND_TRIP)
def test_the_command_shown_builds_the_same_run(fields, tmp_path):
    """Options (as the Validate view fills them) → the command line it shows → the CLI's
    parser → the same BenchRequest as the options built directly."""
    from app.cli.bench import options_of
    from app.cli.main import build_parser
    from engines.config import EngineConfig
    from runners.benchmark.from_options import build_request
    from runners.benchmark.options import bench_argv, parse_options

    config = EngineConfig(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct")
    rec = tmp_path / "rec.json"
    rec.write_text(config.model_dump_json())
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    swap = {"REC": str(rec), "VENV": str(tmp_path / "venv")}
    options = parse_options({k: swap.get(v, v) if isinstance(v, str) else v
                             for k, v in fields.items()})
    argv = bench_argv(options)
    assert argv[:4] == ["python", "-m", "app", "bench"]
    parsed = options_of(build_parser().parse_args(argv[3:]))
    assert parsed == options
    direct = build_request(options, config=config if options.launch else None)
    assert build_request(parsed) == direct
    if options.launch is None:
        assert direct.engine == fields["engine"]
        assert direct.workload.run == Sweep(max_concurrency=8)
    else:
        assert direct.launch is not None and direct.launch.config == config
    if options.launch == "docker":
        launch = direct.launch
        assert (launch.image, launch.gpus, launch.docker_network, launch.pull) == (
            "my/vllm:dev", [0, 2], "host", "never")


def _launched(tmp_path, engine: str, quantization: str):
    """The launch `bench --launch local --config rec.json` builds for a pick of Llama-3.1-8B
    on one H100 with `quantization` weights (the rec.json carrying the catalog's facts)."""
    from engines.export.request import ExportRequest
    from recommender.catalog.facts import hardware_facts, model_facts
    from recommender.catalog.lookup import get_gpu, get_model
    from runners.benchmark.from_options import build_request
    from runners.benchmark.options import parse_options

    request = ExportRequest(
        config={"engine": engine, "model": "meta-llama/Llama-3.1-8B-Instruct",
                "weight_quantization": quantization},
        hardware=hardware_facts(get_gpu("H100-SXM"), 1),
        model_facts=model_facts(get_model("meta-llama/Llama-3.1-8B-Instruct")))
    rec = tmp_path / "rec.json"
    rec.write_text(request.model_dump_json())
    options = parse_options({"launch": "local", "config_path": str(rec),
                             "workload": "concurrency", "concurrency": 2, "num_requests": 6,
                             "prompt_tokens": 16, "output_tokens": 3})
    launch = build_request(options).launch
    assert launch is not None
    return launch


def test_launch_from_a_trtllm_fp8_pick_serves_the_fp8_checkpoint(tmp_path):
    """The launched engine runs what the bundle would: TensorRT-LLM cannot quantize on load,
    so an FP8 pick of Llama-3.1-8B launches the catalog's FP8 checkpoint, not the BF16 one."""
    launch = _launched(tmp_path, "trtllm", "fp8")
    assert launch.config.model == "nvidia/Llama-3.1-8B-Instruct-FP8"


def test_launch_from_a_vllm_awq_pick_serves_the_awq_checkpoint(tmp_path):
    """vLLM reads AWQ only from an AWQ checkpoint: an AWQ pick of Llama-3.1-8B launches the
    catalog's AWQ checkpoint (with --quantization awq_marlin), not the BF16 one."""
    launch = _launched(tmp_path, "vllm", "awq")
    assert launch.config.model == "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
    assert launch.config.weight_quantization == "awq"


# `bench --predict`: the prediction of exactly the requests the run sends (issue 29, item 2).
PICK = {"config": {"engine": "vllm", "model": "Llama-3.1-8B", "tp": 1}, "gpu": "H100-SXM"}
CLOSED = ("--workload", "concurrency", "--concurrency", "4", "--num-requests", "24",
          "--prompt-tokens", "64", "--output-tokens", "16")


def test_predict_is_predict_of_the_same_closed_loop(cli, fake, tmp_path):
    """A closed loop of fixed lengths sends what `predict --concurrency 4 --num-requests 24`
    asks about: the run's prediction is that answer, figure for figure."""
    (tmp_path / "rec.json").write_text(json.dumps(PICK))
    out = cli("bench", "--endpoint", fake.url, "--config", "rec.json", "--predict", *CLOSED,
              "--workspace", str(tmp_path / "w.duckdb"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    ref = cli("predict", "--engine", "vllm", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM",
              "--tp", "1", "--isl", "64", "--osl", "16", "--concurrency", "4",
              "--num-requests", "24", "--json", cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    expected = json.loads(ref.stdout)
    predicted = got["predicted"]
    assert predicted["requests"] == got["completed"] == 24
    assert predicted["mode"] == "closed_loop"
    for key in ("ttft_ms", "tpot_ms", "e2e_ms", "output_throughput_tok_s"):
        assert predicted[key] == pytest.approx(expected[key], rel=1e-12), key
    # No SLO: goodput is every served request on both sides (one rule, core.figures).
    assert predicted["goodput_rps"] == pytest.approx(predicted["request_throughput_rps"])
    assert got["goodput_rps"] == pytest.approx(got["request_throughput_rps"])


def test_predict_of_a_trace_replay_holds_its_window_at_its_time_scale(cli, fake, tmp_path):
    """A trace replay's prediction holds the requests sent (the first 20 of the trace, their
    prompts as logged, 8 output tokens each) at their compressed offsets: the predicted run
    lasts from the first send to the last (1,067 trace seconds x 0.002) plus the last
    request's service."""
    import pandas as pd

    trace = ROOT / "tests" / "data" / "traces" / "BurstGPT_1.head400.csv"
    (tmp_path / "rec.json").write_text(json.dumps(PICK))
    out = cli("bench", "--endpoint", fake.url, "--config", "rec.json", "--predict",
              "--workload", "trace", "--trace", str(trace), "--num-requests", "20",
              "--time-scale", "0.002", "--output-tokens", "8",
              "--workspace", str(tmp_path / "w.duckdb"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    head = pd.read_csv(trace).head(20)
    last_send_s = (head["Timestamp"].iloc[-1] - head["Timestamp"].iloc[0]) * 0.002
    tokens_per_request = (head["Request tokens"].sum() + 20 * 8) / 20
    predicted = got["predicted"]
    assert predicted["requests"] == got["completed"] == 20 and predicted["mode"] == "sent"
    rps = predicted["request_throughput_rps"]
    assert last_send_s < 20 / rps < last_send_s + 1.0  # the makespan
    assert predicted["total_throughput_tok_s"] / rps == pytest.approx(tokens_per_request)


@pytest.mark.parametrize(("rec", "args", "message"), [
    (None, CLOSED, "--predict needs --config REC_JSON"),
    ({"engine": "vllm", "model": "Llama-3.1-8B"}, CLOSED,
     "--predict needs the GPU the deployment runs on"),
    (PICK, ("--workload", "concurrency", "--concurrency", "2", "--duration-s", "5",
            "--prompt-tokens", "8", "--output-tokens", "2"), "give a request count"),
    (PICK, ("--workload", "sweep", "--concurrency", "4", "--num-requests", "8",
            "--prompt-tokens", "8", "--output-tokens", "2"), "a sweep or a boundary"),
])
def test_what_predict_cannot_predict_is_one_line_exit_2(cli, tmp_path, rec, args, message):
    if rec is not None:
        (tmp_path / "rec.json").write_text(json.dumps(rec))
    config = ("--config", "rec.json") if rec is not None else ()
    out = cli("bench", "--endpoint", "http://127.0.0.1:9", *config, "--predict", *args,
              "--workspace", str(tmp_path / "w.duckdb"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w.duckdb").exists()  # refused before anything ran
