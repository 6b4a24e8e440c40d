"""Tests for the `boundary` workload (runners/load/workloads.py) and its stop rule
(runners/benchmark/boundary.py): steps compress the same requests, the first broken rule stops
it."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from core.load import FixedLengths, LoadSpec, Offline, Rate
from runners.benchmark.boundary import analyze_boundary, judge_step, should_stop
from runners.load.schedule import offered_rps
from runners.load.schemas import RequestResult
from runners.load.workloads import boundary_steps, build_schedule
from tests.runners.loads import boundary


def _spec() -> LoadSpec:
    return boundary(4.0, num_requests=30, input_tokens=16, output_tokens=4, step_factor=2.0,
                    max_steps=4, seed=5)


def test_steps_compress_the_same_poisson_requests():
    steps = boundary_steps(_spec())
    assert [m for m, _ in steps] == [1.0, 2.0, 4.0, 8.0]
    first = np.array([r.at_s for r in steps[0][1].requests])
    for m, schedule in steps:
        at = np.array([r.at_s for r in schedule.requests])
        np.testing.assert_allclose(at, first / m)
        assert {r.phase for r in schedule.requests} == {f"x{m:g}"}
        assert offered_rps(schedule) == pytest.approx(m * offered_rps(steps[0][1]))
        assert len(schedule.requests) == 30  # each step bounded by num_requests
    # the plug-in builds the first step
    assert [r.at_s for r in build_schedule(_spec()).requests] == list(first)


def test_a_boundary_needs_a_load_and_a_bound():
    lengths = FixedLengths(input_tokens=4, output_tokens=4)
    with pytest.raises(ValidationError, match="a boundary replays a trace, or a Poisson rate"):
        LoadSpec(lengths=lengths, arrival=Offline(), num_requests=10, run={"kind": "boundary"})
    with pytest.raises(ValidationError, match="a request count or a duration"):
        LoadSpec(lengths=lengths, arrival=Rate(rate_rps=1.0), run={"kind": "boundary"})


def _result(sent: float, ttft: float, *, ok: bool = True) -> RequestResult:
    first = sent + ttft
    chunks = [first + 0.01 * k for k in range(4)] if ok else []
    return RequestResult(success=ok, error=None if ok else "boom", sent_at_s=sent,
                         first_token_at_s=chunks[0] if ok else None,
                         last_token_at_s=chunks[-1] if ok else None, end_at_s=first + 0.03,
                         chunk_times_s=chunks, output_tokens=4 if ok else None,
                         prompt_tokens=16)


def test_the_stop_rule_and_the_boundary_it_reports():
    steady = [_result(i * 0.1, 0.02) for i in range(12)]
    growing = [_result(i * 0.1, 0.02 + 0.05 * i) for i in range(12)]  # a queue builds
    failing = [_result(i * 0.1, 0.02, ok=i % 5 != 0) for i in range(12)]
    span = (0.0, 2.0)
    held = judge_step(0, 1.0, 10.0, steady, span=span, slo=(None, None))
    assert held.holds and held.broke is None and held.completed == 12
    assert judge_step(1, 2.0, 20.0, growing, span=span, slo=(None, None)).broke == "queue_growth"
    assert judge_step(1, 2.0, 20.0, steady, span=span, slo=(0.01, None)).broke == "slo_ttft"
    assert judge_step(1, 2.0, 20.0, failing, span=span, slo=(None, None)).broke == "errors"
    broke = judge_step(1, 2.0, 20.0, growing, span=span, slo=(None, None))
    assert not should_stop([held]) and should_stop([held, broke])
    found = analyze_boundary([held, broke])
    assert found.boundary_rps == 10.0 and not found.capped
    assert found.stopped_because == "queue_growth"
    ran_out = analyze_boundary([held])
    assert ran_out.capped and ran_out.stopped_because == "steps ran out"
    assert analyze_boundary([broke]).boundary_rps is None
