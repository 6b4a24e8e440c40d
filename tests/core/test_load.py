"""`core.load`: what a LoadSpec accepts, and its JSON round trip through the unions."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from core.load import (
    Burst,
    ClosedLoop,
    FixedLengths,
    LoadSpec,
    Offline,
    Rate,
    SentRequests,
    TraceWindow,
    fixed,
)
from core.run_shape import Boundary, Single, Soak, Sweep

LENGTHS = FixedLengths(input_tokens=512, output_tokens=128)


def test_fixed_lengths_need_an_arrival():
    with pytest.raises(ValidationError, match="fixed lengths need an arrival"):
        LoadSpec(lengths=LENGTHS)


def test_a_trace_window_carries_its_own_arrivals():
    spec = LoadSpec(lengths=TraceWindow(path="t.csv", duration_s=60))
    assert spec.arrival is None and spec.lengths.kind == "trace"


def test_offline_fixed_needs_num_requests():
    with pytest.raises(ValidationError, match="needs num_requests"):
        LoadSpec(lengths=LENGTHS, arrival=Offline())
    assert LoadSpec(lengths=LENGTHS, arrival=Offline(), num_requests=64).num_requests == 64
    # A trace window knows its own request count.
    LoadSpec(lengths=TraceWindow(path="t.csv"), arrival=Offline())


@pytest.mark.parametrize("bad", [
    {"input_tokens": 0, "output_tokens": 1}, {"input_tokens": 1, "output_tokens": 0},
])
def test_lengths_are_at_least_one_token(bad):
    with pytest.raises(ValidationError):
        FixedLengths(**bad)


def test_rate_must_be_positive_and_finite():
    for rate in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValidationError):
            Rate(rate_rps=rate)


def test_unknown_fields_are_refused():
    with pytest.raises(ValidationError):
        LoadSpec.model_validate({"lengths": {"kind": "fixed", "input_tokens": 1,
                                             "output_tokens": 1, "isl": 3},
                                 "arrival": {"kind": "offline"}, "num_requests": 1})


@pytest.mark.parametrize("spec", [
    LoadSpec(lengths=LENGTHS, arrival=ClosedLoop(concurrency=8), seed=3),
    LoadSpec(lengths=LENGTHS, arrival=Rate(rate_rps=2.5, process="gamma", cv=2.0),
             num_requests=500),
    LoadSpec(lengths=LENGTHS, arrival=Offline(), num_requests=10),
    LoadSpec(lengths=TraceWindow(path="x.jsonl", start_s=5, duration_s=30, time_scale=2)),
])
def test_json_round_trip_through_the_discriminated_unions(spec):
    text = spec.model_dump_json()
    back = LoadSpec.model_validate_json(text)
    assert back == spec
    assert type(back.lengths) is type(spec.lengths)
    assert type(back.arrival) is type(spec.arrival)


def test_the_kind_picks_the_record():
    raw = {"lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 20},
           "arrival": {"kind": "rate", "rate_rps": 4}}
    spec = LoadSpec.model_validate_json(json.dumps(raw))
    assert isinstance(spec.arrival, Rate) and spec.arrival.process == "poisson"
    assert spec.arrival.cv == 1.0 and spec.seed == 0
    raw["arrival"] = {"kind": "closed_loop", "rate_rps": 4}  # fields of another kind
    with pytest.raises(ValidationError):
        LoadSpec.model_validate(raw)


def test_fixed_helper_takes_exactly_one_arrival():
    assert fixed(10, 5, concurrency=4).arrival == ClosedLoop(concurrency=4)
    assert fixed(10, 5, rate_rps=1.5, seed=9) == LoadSpec(
        lengths=FixedLengths(input_tokens=10, output_tokens=5), arrival=Rate(rate_rps=1.5),
        seed=9)
    assert fixed(10, 5, offline=True, num_requests=3).arrival == Offline()
    for kwargs in ({}, {"concurrency": 2, "rate_rps": 1.0}, {"offline": True, "concurrency": 1}):
        with pytest.raises(ValueError, match="exactly one"):
            fixed(10, 5, **kwargs)


@pytest.mark.parametrize(("make", "field"), [
    (lambda: fixed(10_000_001, 10, concurrency=1), "input_tokens"),
    (lambda: fixed(10, 10, concurrency=100_001), "concurrency"),
    (lambda: fixed(10, 10, offline=True, num_requests=1_000_000_000), "num_requests"),
    (lambda: fixed(10, 10, rate_rps=float("inf")), "rate_rps"),
    (lambda: fixed(10, 10, rate_rps=2e6), "rate_rps"),
    (lambda: TraceWindow(path="t.csv", time_scale=float("inf")), "time_scale"),
    (lambda: TraceWindow(path="t.csv", duration_s=float("inf")), "duration_s"),
])
def test_sizes_no_deployment_means_are_refused_up_front(make, field):
    """A typo of three zeros used to fill the host's memory (10^9 queued requests: 19 GB in
    30 s) or never end (an infinite rate or time scale)."""
    with pytest.raises(ValidationError) as info:
        make()
    assert info.value.errors()[0]["loc"][-1] == field


def test_sent_requests_are_their_own_count_and_open_loop_their_own_arrivals():
    open_loop = SentRequests(at_s=[0.0, 0.5], input_tokens=[10, 20], output_tokens=[3, 4])
    assert LoadSpec(lengths=open_loop).arrival is None
    closed = open_loop.model_copy(update={"at_s": None})
    assert LoadSpec(lengths=closed, arrival=ClosedLoop(concurrency=2)).num_requests is None
    with pytest.raises(ValidationError, match="closed_loop arrival exactly when"):
        LoadSpec(lengths=open_loop, arrival=ClosedLoop(concurrency=2))
    with pytest.raises(ValidationError, match="closed_loop arrival exactly when"):
        LoadSpec(lengths=closed)
    with pytest.raises(ValidationError, match="their own count"):
        LoadSpec(lengths=open_loop, num_requests=3)


@pytest.mark.parametrize("fields", [
    {"at_s": [0.0], "input_tokens": [10, 20], "output_tokens": [3, 4]},
    {"input_tokens": [10, 20], "output_tokens": [3]},
    {"input_tokens": [10], "output_tokens": [3], "block_hashes": [[1, 2]]},
    {"input_tokens": [10], "output_tokens": [3], "block_hashes": [[1], [2]], "block_size": 16},
    {"input_tokens": [], "output_tokens": []},
    {"at_s": [-1.0], "input_tokens": [10], "output_tokens": [3]},
    {"input_tokens": [0], "output_tokens": [3]},
])
def test_sent_requests_refuse_lists_that_do_not_line_up(fields):
    with pytest.raises(ValidationError):
        SentRequests(**fields)


# --- what bench needs too (issue 29): a trace's source and overrides, a burst, a run's
# duration and in-flight cap, and the run shapes; each impossible combination is one line.

POISSON = Rate(rate_rps=2.0)
BURST = Burst(base_rate_rps=2.0, peak_rate_rps=8.0, steady_s=10.0, burst_s=5.0)
GAMMA = Rate(rate_rps=2.0, process="gamma", cv=2.0)


def test_a_trace_window_is_a_file_a_workspace_or_both():
    with pytest.raises(ValidationError, match="needs a trace file"):
        TraceWindow()
    both = TraceWindow(path="t.csv", workspace="w.duckdb", input_tokens=64,
                       max_output_tokens=16)
    assert (both.output_tokens, both.max_input_tokens) == (None, None)
    assert TraceWindow(workspace="w.duckdb").path is None
    with pytest.raises(ValidationError):
        TraceWindow(path="t.csv", max_input_tokens=0)


def test_a_burst_is_three_phases_of_its_two_rates():
    assert BURST.phases() == [("steady", 0.0, 10.0, 2.0), ("burst", 10.0, 15.0, 8.0),
                              ("recovery", 15.0, 25.0, 2.0)]
    for bad in ({"steady_s": 0.0}, {"peak_rate_rps": float("inf")}, {"burst_s": -1.0}):
        with pytest.raises(ValidationError):
            Burst.model_validate({**BURST.model_dump(), **bad})


@pytest.mark.parametrize("spec", [
    LoadSpec(lengths=LENGTHS, arrival=BURST),
    LoadSpec(lengths=LENGTHS, arrival=POISSON, duration_s=60.0, max_in_flight=8),
    LoadSpec(lengths=LENGTHS, arrival=POISSON, duration_s=60.0, run=Soak(window_s=6.0)),
    LoadSpec(lengths=LENGTHS, arrival=ClosedLoop(concurrency=1), num_requests=32,
             run=Sweep(max_concurrency=64)),
    LoadSpec(lengths=LENGTHS, arrival=POISSON, num_requests=100,
             run=Boundary(step_factor=2.0, max_steps=3)),
    LoadSpec(lengths=TraceWindow(workspace="w.duckdb", duration_s=30.0, time_scale=0.5),
             max_in_flight=4, run=Boundary()),
])
def test_the_new_loads_round_trip_through_json(spec):
    back = LoadSpec.model_validate_json(spec.model_dump_json())
    assert back == spec and type(back.run) is type(spec.run)


TRACE = TraceWindow(path="t.csv")
SENT = SentRequests(at_s=[0.0, 0.5], input_tokens=[10, 20], output_tokens=[3, 4])


@pytest.mark.parametrize(("fields", "message"), [
    # a duration bounds a rate or a concurrency, nothing else
    ({"lengths": TRACE, "duration_s": 5.0}, "a run's duration bounds a rate or a concurrency"),
    ({"lengths": SENT, "duration_s": 5.0}, "a run's duration bounds a rate or a concurrency"),
    ({"arrival": BURST, "duration_s": 5.0}, "a run's duration bounds a rate or a concurrency"),
    ({"arrival": Offline(), "num_requests": 5, "duration_s": 5.0},
     "a run's duration bounds a rate or a concurrency"),
    ({"arrival": BURST, "num_requests": 5}, "a burst sends its rates over its phases"),
    # a cap on requests in flight is an open loop's
    ({"arrival": ClosedLoop(concurrency=2), "num_requests": 5, "max_in_flight": 2},
     "a cap on requests in flight is an open loop's"),
    ({"arrival": Offline(), "num_requests": 5, "max_in_flight": 2},
     "a cap on requests in flight is an open loop's"),
    # a soak: a duration, and a steady Poisson rate or concurrency
    ({"arrival": POISSON, "run": Soak(window_s=1.0)}, "a soak runs for a duration"),
    ({"arrival": GAMMA, "duration_s": 9.0, "run": Soak(window_s=1.0)},
     "a soak holds a Poisson rate or a concurrency steady"),
    ({"arrival": BURST, "run": Soak(window_s=1.0)}, "a soak runs for a duration"),
    # a sweep: a closed loop at most its cap
    ({"arrival": POISSON, "num_requests": 5, "run": Sweep(max_concurrency=8)},
     "a sweep runs a closed loop"),
    ({"arrival": ClosedLoop(concurrency=16), "num_requests": 5, "run": Sweep(max_concurrency=8)},
     "above its cap"),
    # a boundary: a trace or Poisson with fixed lengths, each step bounded
    ({"arrival": ClosedLoop(concurrency=2), "num_requests": 5, "run": Boundary()},
     "a boundary replays a trace, or a Poisson rate"),
    ({"arrival": GAMMA, "num_requests": 5, "run": Boundary()},
     "a boundary replays a trace, or a Poisson rate"),
    ({"arrival": POISSON, "run": Boundary()}, "a request count or a duration"),
    ({"lengths": TRACE, "run": Boundary()}, "a request count or a duration"),
])
def test_each_impossible_combination_is_one_line(fields, message):
    with pytest.raises(ValidationError, match=message) as info:
        LoadSpec(**{"lengths": LENGTHS, **fields})
    assert len(info.value.errors()) == 1


def test_a_trace_boundary_is_bounded_by_its_window_and_fixed_takes_a_duration():
    window = TraceWindow(path="t.csv", duration_s=60.0)
    assert LoadSpec(lengths=window, run=Boundary()).run == Boundary(step_factor=1.5, max_steps=8)
    spec = fixed(10, 5, rate_rps=2.0, duration_s=30.0)
    assert spec.duration_s == 30.0 and spec.num_requests is None and spec.run == Single()
