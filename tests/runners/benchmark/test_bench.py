"""Benchmark orchestration against a local streaming server (tests/runners/fake_openai.py):
every request accounted for and stored, metrics scraped, the sweep stops past the knee of a
server that runs two requests at a time, a burst shows its spike, and a run stopped or whose
server dies half-way is stored with its rows and the right status."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import runners.benchmark.bench
import runners.benchmark.live_run
from core.load import LoadSpec
from profiler.workspace import Workspace
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.live_run import ProgressSample
from runners.benchmark.stored_runs import list_runs, load_run
from tests.runners import loads
from tests.runners.fake_openai import FakeOpenAI
from tests.runners.loads import burst, closed, poisson, sweep


@pytest.fixture
def fake():
    server = FakeOpenAI(ttft_s=0.02, tpot_s=0.01).start()
    yield server
    server.stop()


def _poisson(n: int, rate: float, out: int = 4) -> LoadSpec:
    return poisson(rate, num_requests=n, input_tokens=48, output_tokens=out, seed=3)


def test_poisson_run_is_measured_scraped_and_stored(fake, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    seen: list[ProgressSample] = []
    req = BenchRequest(endpoint_url=fake.url, workload=_poisson(24, 20.0),
                       scrape_interval_s=0.2, slo_ttft_p95_s=5.0, argv=["bench", "x"])
    report = run_bench(req, workspace=ws, progress=seen.append)
    s = report.summary
    assert report.status == "complete" and s.count == s.completed == 24
    assert all(b["max_tokens"] == 4 and b["ignore_eos"] for b in fake.bodies)
    assert s.output_throughput_tok_s == pytest.approx(4 * s.request_throughput_rps)
    assert s.ttft_s.p50 >= 0.02 and report.slo_met is True
    assert s.goodput_rps == pytest.approx(s.request_throughput_rps)
    assert report.scraped.scrapes >= 2 and report.scraped.failures == 0
    assert report.scraped.prefix_cache_hit_rate is not None
    assert seen and seen[-1].completed == 24
    record = load_run(ws, report.run_id)
    assert record.info.status == "complete" and record.info.argv == ["bench", "x"]
    assert sorted(r.idx for r in record.requests) == list(range(24))
    assert all(r.result.output_tokens == 4 and r.phase == "poisson" for r in record.requests)
    assert {m.key for m in record.metrics} >= {"queue_depth", "running"}
    assert record.info.summary["completed"] == 24


def test_sweep_stops_past_the_knee(tmp_path):
    server = FakeOpenAI(ttft_s=0.01, tpot_s=0.02, max_running=2).start()
    try:
        spec = sweep(32, num_requests=8, input_tokens=32, output_tokens=6)
        report = run_bench(BenchRequest(endpoint_url=server.url, workload=spec),
                           workspace=Workspace(tmp_path / "w.duckdb"))
    finally:
        server.stop()
    levels = [lv.concurrency for lv in report.levels]
    assert report.knee.knee_concurrency == 2 and levels == [1, 2, 4]
    assert report.summary.completed == 8 + 8 + 16
    assert report.summary.peak_concurrency == 4


def test_burst_spike_and_queue(tmp_path):
    server = FakeOpenAI(ttft_s=0.01, tpot_s=0.02, max_running=2).start()
    try:
        spec = burst(4, 50, 1.5, 1.0, input_tokens=32, output_tokens=4, seed=1)
        report = run_bench(BenchRequest(endpoint_url=server.url, workload=spec,
                                        scrape_interval_s=0.1),
                           workspace=Workspace(tmp_path / "w.duckdb"))
    finally:
        server.stop()
    b = report.burst
    assert report.status == "complete" and b is not None
    # Capacity is 2 requests per 0.07 s ≈ 29 req/s: 50 req/s for 1 s must queue.
    assert b.ttft_spike_ratio > 2 and b.peak_queue_depth >= 3 and b.baseline_queue_depth < 1


def test_stopped_half_way_is_incomplete_with_rows(fake, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    stop = threading.Event()

    def progress(p: ProgressSample) -> None:
        if p.completed >= 5:
            stop.set()

    report = run_bench(BenchRequest(endpoint_url=fake.url, workload=_poisson(200, 20.0)),
                       workspace=ws, progress=progress, stop=stop)
    assert report.status == "incomplete"
    assert 5 <= report.summary.completed < 200
    [info] = list_runs(ws)
    assert info.status == "incomplete" and info.n_requests == report.summary.count


def test_server_dying_half_way_fails_the_run_and_keeps_rows(fake, tmp_path, monkeypatch):
    # Health checks every 0.2 s instead of 1 s: the run still ends only after HEALTH_FAILURES
    # checks in a row fail (each may wait 2 s for an answer), so a loaded machine cannot fake a
    # dead server, and the test waits 0.6 s for the verdict instead of 3 s.
    monkeypatch.setattr(runners.benchmark.live_run, "HEALTH_INTERVAL_S", 0.2)
    ws = Workspace(tmp_path / "w.duckdb")
    killed = []

    def progress(p: ProgressSample) -> None:
        if p.completed >= 5 and not killed:
            killed.append(p.completed)
            fake.die()

    report = run_bench(BenchRequest(endpoint_url=fake.url, workload=_poisson(400, 20.0)),
                       workspace=ws, progress=progress)
    assert report.status == "failed"
    assert "stopped answering its health check" in (report.error or "")
    [info] = list_runs(ws)
    record = load_run(ws, info.run_id)
    ok = np.array([r.result.success for r in record.requests])
    assert info.status == "failed" and info.error == report.error
    assert ok.sum() >= killed[0] and (~ok).any() and len(record.requests) < 400


def test_soak_windows_follow_the_phases(fake, tmp_path):
    spec = loads.soak(0.5, 2.0, rate_rps=25, input_tokens=16, output_tokens=2, seed=2)
    report = run_bench(BenchRequest(endpoint_url=fake.url, workload=spec),
                       workspace=Workspace(tmp_path / "w.duckdb"))
    soak = report.soak
    assert report.status == "complete" and soak is not None and soak.windows == 4
    record = load_run(Workspace(tmp_path / "w.duckdb"), report.run_id)
    phases = [r.phase for r in record.requests]
    assert set(phases) == {"w0", "w1", "w2", "w3"}
    # A steady server: the last window is neither slower nor less busy by much.
    assert 0.5 < soak.ttft_p50_ratio < 2 and 0.3 < soak.throughput_ratio < 3


def test_warmup_is_sent_first_and_not_measured(fake, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    spec = poisson(20.0, num_requests=12, input_tokens=48, output_tokens=4, seed=3)
    report = run_bench(BenchRequest(endpoint_url=fake.url, workload=spec, warmup_s=0.5,
                                    scrape_interval_s=0.1), workspace=ws)
    warm = report.warmup_requests
    assert warm > 0 and len(fake.bodies) == warm + 12
    # The warm-up is a closed loop of 4 (Poisson has no concurrency) with the same lengths, and
    # its prompts share nothing with the measured ones.
    first, measured = fake.bodies[:warm], fake.bodies[warm:]
    assert all(len(b["prompt"]) == 48 and b["max_tokens"] == 4 for b in first)
    assert not {tuple(b["prompt"]) for b in first} & {tuple(b["prompt"]) for b in measured}
    assert report.summary.count == report.summary.completed == 12
    record = load_run(ws, report.run_id)
    assert sorted(r.idx for r in record.requests) == list(range(12))
    assert record.info.workload["warmup_s"] == 0.5


def test_stored_run_compares_with_a_prediction(fake, tmp_path):
    """A real run, stored, loaded back as a typed Summary, and set against a prediction by
    `core.figures.compare`: errors are (predicted − measured) / measured of the stored rows."""
    from core.figures import Latency, ServingFigures, compare
    from runners.benchmark.stored_runs import run_summary

    ws = Workspace(tmp_path / "w.duckdb")
    report = run_bench(BenchRequest(endpoint_url=fake.url, workload=_poisson(16, 40.0)),
                       workspace=ws)
    measured = run_summary(load_run(ws, report.run_id))
    assert measured == report.summary
    rows = [r.result for r in load_run(ws, report.run_id).requests]
    ttft = np.array([r.ttft_s for r in rows])
    e2e = np.array([r.e2e_s for r in rows])
    pred = ServingFigures(
        ttft_s=Latency(count=1, p50=0.03, p95=0.05, p99=0.06),
        tpot_s=Latency(count=1), itl_s=Latency(count=1),
        e2e_s=Latency(count=1, p50=0.1, p95=0.12, p99=0.2),
        output_throughput_tok_s=100.0, total_throughput_tok_s=1000.0,
        request_throughput_rps=30.0, goodput_rps=None)
    got = {d.figure: d for d in compare(pred, measured)}
    for q, p in (("p50", 0.03), ("p95", 0.05), ("p99", 0.06)):
        m = np.percentile(ttft, int(q[1:]))
        assert got[f"ttft_s.{q}"].error == pytest.approx((p - m) / m, rel=1e-9)
    m = np.percentile(e2e, 95)
    assert got["e2e_s.p95"].error == pytest.approx((0.12 - m) / m, rel=1e-9)
    assert got["tpot_s.p50"].error is None  # no prediction
    rps = 16 / measured.duration_s  # every request completed
    assert got["request_throughput_rps"].error == pytest.approx((30.0 - rps) / rps, rel=1e-9)
    tok = 16 * 4 / measured.duration_s
    assert got["output_throughput_tok_s"].error == pytest.approx((100.0 - tok) / tok, rel=1e-9)
    assert got["goodput_rps"].error is None and got["ttft_s.p50"].within_band is None


def test_summaries_stored_before_the_band_field_still_load():
    """A summary stored by an earlier version (Dist shapes, no `band`) loads as a Summary."""
    from runners.benchmark.metrics import Summary

    lat = {"count": 2, "mean": 0.5, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
    old = {"count": 2, "completed": 2, "errors": {}, "error_rate": 0.0, "missing_usage": 0,
           "duration_s": 2.0, "ttft_s": lat, "tpot_s": lat, "itl_s": lat, "e2e_s": lat,
           "request_throughput_rps": 1.0, "output_throughput_tok_s": 8.0,
           "total_throughput_tok_s": 40.0, "achieved_rate_rps": 1.0, "goodput_rps": 1.0,
           "slo_ttft_s": None, "slo_tpot_s": None, "peak_concurrency": 1, "window_s": 1.0,
           "series": []}
    s = Summary.model_validate(old)
    assert s.band is None and s.ttft_s.p95 == 0.95 and s.goodput_rps == 1.0


def test_a_speculating_engine_counts_reach_the_report(fake, tmp_path):
    # The fake engine drafts k = 3 tokens per step and accepts 2 of them: 3 tokens per verify
    # step. Outputs of 7 tokens: 6 after the first, 2 steps each, every step fully counted.
    fake.spec_k, fake.spec_accepted = 3, 2
    req = BenchRequest(endpoint_url=fake.url, workload=_poisson(12, 20.0, out=7),
                       scrape_interval_s=0.1, argv=["bench"])
    spec = run_bench(req, workspace=Workspace(tmp_path / "w.duckdb")).scraped.speculative
    assert spec is not None and spec.draft_tokens == 3
    assert spec.tokens_per_step == pytest.approx(3.0)
    a = next(r.real for r in np.roots([1, 1, 1, 1 - 3.0])
             if abs(r.imag) < 1e-12 and 0 < r.real < 1)
    assert spec.acceptance == pytest.approx(a, abs=1e-6)


def test_a_health_path_that_never_answered_is_not_a_server_that_stopped(tmp_path, monkeypatch):
    # The watchdog arms on a first passing health check. A run whose requests all fail before
    # that first check has answered (a slow machine) must be failed by its requests, not
    # called a server that "stopped answering during the run": it never answered. The first
    # check is made to take 2 s and fail; the three requests fail at once (non-HTTP bytes).
    import asyncio

    from tests.runners.hostile import HostileServer

    calls = []

    async def slow_then_down(url: str) -> bool:
        calls.append(url)
        if len(calls) == 1:
            await asyncio.sleep(2.0)
        return False

    # The watchdog's checks and the run's last one, each module's binding of `healthy`.
    monkeypatch.setattr(runners.benchmark.live_run, "healthy", slow_then_down)
    monkeypatch.setattr(runners.benchmark.bench, "healthy", slow_then_down)
    server = HostileServer("not_http").start()
    try:
        spec = closed(3, num_requests=3, input_tokens=8, output_tokens=2)
        request = BenchRequest(endpoint_url=server.url, workload=spec, model="m",
                               vocab_size=5000, timeout_s=2.0)
        report = run_bench(request, workspace=Workspace(tmp_path / "w.duckdb"))
    finally:
        server.stop()
    assert report.status == "failed"
    assert (report.error or "").startswith("no request succeeded: 3 of 3 failed")
    assert len(calls) == 1  # no second check of a path that never passed one


def test_a_server_that_does_not_start_is_a_failed_run_in_the_store(tmp_path):
    """Issue 27: a failed launch raised and left nothing, so the attempt never showed under
    Runs; now it is stored failed with the launch's reason, and still raises."""
    import sys

    from core.errors import RunnerError
    from engines.rendering import openai_readiness
    from runners.server.launch_spec import LaunchSpec

    spec = LaunchSpec(mode="local", argv=[sys.executable, "-c", "raise SystemExit(3)"],
                      probe=openai_readiness("fake"),
                      log_dir=tmp_path / "logs", ready_timeout_s=20.0, poll_interval_s=0.05,
                      stop_timeout_s=5.0)
    ws = Workspace(tmp_path / "w.duckdb")
    with pytest.raises(RunnerError) as raised:
        run_bench(BenchRequest(launch=spec, workload=_poisson(4, 5.0)), workspace=ws)
    [info] = list_runs(ws)
    assert info.status == "failed" and info.n_requests == 0
    assert info.error.startswith("the server did not start: ")
    assert raised.value.reason in info.error
