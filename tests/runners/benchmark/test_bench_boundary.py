"""`bench --workload boundary` end to end: against the local streaming server with a fixed
capacity (fast), and against the real vLLM CPU engine (slow): it stops within its bound,
stores every step with the run, and reports a boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.load import LoadSpec
from profiler.workspace import Workspace
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.stored_runs import load_run
from runners.load.schedule import offered_rps
from runners.load.workloads import boundary_steps
from tests.runners.fake_openai import FakeOpenAI
from tests.runners.loads import boundary

TTFT_S, TPOT_S, OUT, RUNNING = 0.01, 0.02, 4, 2


def _stored_steps(ws: Workspace, run_id: str, spec: LoadSpec, steps_run: int) -> None:
    """Every request of every step run is stored, in its step's phase, and nothing more."""
    record = load_run(ws, run_id)
    n = spec.num_requests
    assert n is not None
    phases = [f"x{m:.3g}" for m, _ in boundary_steps(spec)[:steps_run]]
    assert sorted(r.idx for r in record.requests) == list(range(steps_run * n))
    assert sorted(r.phase for r in record.requests) == sorted(p for p in phases for _ in range(n))
    stored = record.info.analysis["boundary"]
    assert [s["step"] for s in stored["steps"]] == list(range(steps_run))


def test_boundary_on_a_server_with_a_fixed_capacity(tmp_path):
    # Two requests at a time, each 0.01 + 3 × 0.02 = 0.07 s: about 29 req/s at most. The
    # first step offers ~5 req/s (holds), the second twenty times that (a queue must build).
    capacity = RUNNING / (TTFT_S + (OUT - 1) * TPOT_S)
    server = FakeOpenAI(ttft_s=TTFT_S, tpot_s=TPOT_S, max_running=RUNNING).start()
    spec = boundary(5.0, num_requests=9, step_factor=20.0, max_steps=3, input_tokens=32,
                    output_tokens=OUT, seed=2)
    ws = Workspace(tmp_path / "w.duckdb")
    try:
        report = run_bench(BenchRequest(endpoint_url=server.url, workload=spec,
                                        slo_ttft_p95_s=1.0), workspace=ws)
    finally:
        server.stop()
    b = report.boundary
    assert b is not None and report.status == "complete"
    offered = [offered_rps(s) for _, s in boundary_steps(spec)]
    assert offered[0] < capacity < offered[1]
    # stopped at the second step (within its bound of three), on the queue it built
    assert [s.holds for s in b.steps] == [True, False]
    assert b.steps[1].broke == "queue_growth" and b.stopped_because == "queue_growth"
    assert b.boundary_rps == pytest.approx(offered[0]) and not b.capped
    assert report.summary.count == 2 * 9
    _stored_steps(ws, report.run_id, spec, 2)


def _two_seqs(model_dir: Path, log_dir: Path):
    from tests.runners.conftest import vllm_spec

    spec = vllm_spec(model_dir, log_dir)
    return spec.model_copy(update={"argv": [*spec.argv, "--max-num-seqs", "2"]})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_boundary_on_real_vllm(tiny_model_dir, tmp_path):
    from runners.server.launch import launched
    from runners.server.process_group import group_alive

    # Poisson from 1 req/s, doubling, at most 6 steps of 12 requests (64 output tokens each):
    # the tiny CPU engine running two sequences at a time breaks the 2 s p95 TTFT SLO, or
    # queues, well inside the bound; how far it gets moves with the shared CPUs.
    spec = boundary(1.0, num_requests=12, step_factor=2.0, max_steps=6, input_tokens=64,
                    output_tokens=64, seed=1)
    ws = Workspace(tmp_path / "w.duckdb")
    with launched(_two_seqs(tiny_model_dir, tmp_path)) as ep:
        report = run_bench(BenchRequest(endpoint_url=ep.url, workload=spec,
                                        slo_ttft_p95_s=2.0, scrape_interval_s=0.25),
                           workspace=ws)
    assert not group_alive(ep.pid)
    b = report.boundary
    assert b is not None and report.status == "complete"
    steps_run = len(b.steps)
    assert 1 <= steps_run <= 6 and report.summary.count == 12 * steps_run
    assert all(s.holds for s in b.steps[:-1])  # it stops at the first step that breaks
    if b.capped:
        assert steps_run == 6 and b.boundary_rps == pytest.approx(b.steps[-1].offered_rps)
    else:
        assert b.stopped_because in ("slo_ttft", "queue_growth", "errors", "slo_tpot")
        held = [s for s in b.steps if s.holds]
        assert b.boundary_rps == (held[-1].offered_rps if held else None)
    _stored_steps(ws, report.run_id, spec, steps_run)
