"""Tests for app/run_prediction.py: one `core.load.LoadSpec` is what a benchmark sends and what
`predict` answers. The same record goes to `runners.benchmark.bench.run_bench` against a local
streaming server (tests/runners/fake_openai.py) and to `recommender.sim.predict.predict`; the
run's prediction (`predict_run`, what `bench --predict` and Validate show) is the prediction of
that spec, figure for figure, and counts exactly the requests the server answered."""

from __future__ import annotations

import pytest

from app.run_prediction import predict_run
from core.errors import UsageError
from core.load import LoadSpec
from engines.config import EngineConfig
from profiler.workspace import Workspace
from recommender.sim.predict import PredictRequest, predict
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_request import BenchRequest, schedules_of
from tests.runners.fake_openai import FakeOpenAI
from tests.runners.loads import closed, poisson, sweep

CONFIG = EngineConfig(engine="vllm", model="Llama-3.1-8B", tp=1)
GPU = "H100-SXM"
FIGURES = ("ttft_s", "tpot_s", "e2e_s")


@pytest.fixture
def fake():
    server = FakeOpenAI(ttft_s=0.005, tpot_s=0.002).start()
    yield server
    server.stop()


@pytest.mark.parametrize("spec", [
    closed(4, num_requests=24, input_tokens=64, output_tokens=16, seed=5),
    poisson(50.0, num_requests=30, input_tokens=128, output_tokens=8, seed=9),
], ids=["closed loop", "poisson"])
def test_one_load_spec_is_benchmarked_and_predicted_alike(spec: LoadSpec, fake, tmp_path):
    request = BenchRequest(endpoint_url=fake.url, workload=spec, seed=spec.seed)
    report = run_bench(request, workspace=Workspace(tmp_path / "w.duckdb"))
    assert report.status == "complete"
    n = spec.num_requests
    assert report.summary.completed == len(fake.bodies) == n
    assert {b["max_tokens"] for b in fake.bodies} == {spec.lengths.output_tokens}

    run = predict_run(request, CONFIG, GPU)
    direct = predict(PredictRequest(config=CONFIG, gpu=GPU, model=CONFIG.model, load=spec))
    assert run.requests == direct.requests == n
    assert run.completed == direct.completed == n
    for name in FIGURES:
        got, want = getattr(run, name), getattr(direct, name)
        assert got.mean == pytest.approx(want.mean, rel=1e-9), name
        assert got.p95 == pytest.approx(want.p95, rel=1e-9), name
    # The same tokens over each one's window: a run is timed from its start, and an open
    # loop's first request leaves one gap after it; `predict` of a rate starts its clock at the
    # first arrival, as `vllm bench serve` (which sends its first request at once) does.
    first_send_s = schedules_of(request)[0][1].requests[0].at_s or 0.0
    assert run.makespan_s == pytest.approx(direct.makespan_s + first_send_s, rel=1e-9)
    assert run.output_throughput_tok_s * run.makespan_s == pytest.approx(
        direct.output_throughput_tok_s * direct.makespan_s, rel=1e-9)


def test_a_sweep_is_benchmarked_level_by_level_but_not_predicted_as_one_run(tmp_path):
    spec = sweep(4, num_requests=8, input_tokens=16, output_tokens=4)
    request = BenchRequest(endpoint_url="http://127.0.0.1:9", workload=spec)
    with pytest.raises(UsageError, match="a sweep or a boundary sends several"):
        predict_run(request, CONFIG, GPU)
    with pytest.raises(UsageError, match="predict one level"):
        predict(PredictRequest(config=CONFIG, gpu=GPU, model=CONFIG.model, load=spec))
