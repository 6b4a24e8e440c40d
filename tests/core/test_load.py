"""`core.load`: what a LoadSpec accepts, and its JSON round trip through the unions."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from core.load import (
    ClosedLoop,
    FixedLengths,
    LoadSpec,
    Offline,
    Rate,
    SentRequests,
    TraceWindow,
    fixed,
)

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
