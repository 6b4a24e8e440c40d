"""recommender/decision/routing.py: when to split traffic by input length over two deployments, the
threshold rule a router applies, and how the GPUs are shared between the two.

The workloads are seeded traces written here (arrival, input and output tokens), ingested and
profiled by the real profiler and searched by the real search, on two H100s with the roofline
step time (the measured kernel tables take seconds per cell to build; no routing rule depends
on which step-time provider the simulation uses). Expected thresholds and splits are worked
out by hand in the comments.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.schema import Segment
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.explanation.context import Context
from recommender.decision.goals import Goals, Target
from recommender.decision.routing import MIN_INPUT_RATIO, _gpu_splits, _split, plan_routing
from recommender.model.params import PerfParams
from tests.recommender.decision.seeded import seeded_context

GPU, MODEL = get_gpu("H100-SXM"), get_model("llama-3.1-8b")
GPUS = 2
GOALS = Goals("goodput", 0.3, 0.05)
N = 200
# Fixed roofline parameters (the 532-row fit of December 2026, tests/data/routing_params.json):
# the routing rules are tested on a stated model, not on whatever the latest refit is.
PARAMS = PerfParams.model_validate_json(
    (Path(__file__).resolve().parents[2] / "data" / "routing_params.json").read_text())
RULE = re.compile(r"^input_tokens (<|>=) ([\d,]+)$")


def _target(gpus: int) -> Target:
    return Target(GPU, MODEL, gpus, hardware_facts(GPU, gpus), model_facts(MODEL),
                  PARAMS)


def _context(folder: Path, arrival_s: np.ndarray, inputs: np.ndarray, outputs: np.ndarray
             ) -> Context:
    """The Context `recommend` builds for this trace: profile, whole window, full search."""
    requests = pd.DataFrame({"arrival_s": arrival_s, "input_tokens": inputs,
                             "output_tokens": outputs})
    return seeded_context(folder, requests, _target(GPUS), GOALS)


@pytest.fixture(scope="module")
def bimodal(tmp_path_factory) -> tuple[Context, np.ndarray]:
    """One short-prompt population (100-299 tokens, 80 %) and one long (12,000-15,999, 20 %),
    the same outputs, 12 req/s: (context, which requests are long). Seed 1 is one where the
    simulation finds the routed pair better (a request-weighted p95 request time about half
    the single deployment's, at the same goodput)."""
    rng = np.random.default_rng(1)
    is_long = rng.random(N) < 0.2
    inputs = np.where(is_long, rng.integers(12_000, 16_000, N), rng.integers(100, 300, N))
    outputs = rng.integers(50, 300, N)
    arrival = np.cumsum(rng.exponential(1 / 12, N))
    return _context(tmp_path_factory.mktemp("bimodal"), arrival, inputs, outputs), is_long


@pytest.fixture(scope="module")
def same_inputs(tmp_path_factory) -> Context:
    """Two populations that differ in output length only (20-59 vs 600-999 tokens), prompts
    of 500-1,499 tokens for both."""
    rng = np.random.default_rng(2)
    chatty = rng.random(N) < 0.5
    inputs = rng.integers(500, 1_500, N)
    outputs = np.where(chatty, rng.integers(600, 1_000, N), rng.integers(20, 60, N))
    arrival = np.cumsum(rng.exponential(1 / 4, N))
    return _context(tmp_path_factory.mktemp("same"), arrival, inputs, outputs)


def _segment(input_p50: float) -> Segment:
    return Segment(share=0.5, n_requests=100, input_tokens_p50=input_p50, output_tokens_p50=100,
                   log_input_mean=math.log1p(input_p50), log_output_mean=math.log1p(100),
                   log_cov=[[0.1, 0.0], [0.0, 0.1]])


def _with_segments(ctx: Context, input_p50s: list[float], gpus: int = GPUS) -> Context:
    profile = ctx.profile.model_copy(update={"segments": [_segment(p) for p in input_p50s]})
    return dataclasses.replace(ctx, profile=profile, target=_target(gpus))


def _rule(criteria: str) -> tuple[str, int]:
    match = RULE.match(criteria)
    assert match, criteria
    return match.group(1), int(match.group(2).replace(",", ""))


# ---------------------------------------------------------------------------------------------
# GPU split: proportional to the long part's tokens, and the powers of two either side


@pytest.mark.parametrize(("gpus", "long_share", "expected"), [
    (8, 0.30, [2, 4, 6]),  # 2.4 → 2; powers of two 2 and 4; the short side's 6 and 4
    (16, 0.40, [4, 6, 8, 12]),  # 6.4 → 6; between 4 and 8; the short side's 12 and 8
    (8, 0.99, [4, 7]),  # 7.9 → 7 (one GPU stays short); 4 (8 is all of them); 8 - 4
    (4, 0.01, [1, 2, 3]),  # 0.04 → 1 (at least one GPU); 1 and 2; 3 and 2
    (2, 0.50, [1]),  # two GPUs: one each
])
def test_gpu_splits(gpus: int, long_share: float, expected: list[int]) -> None:
    assert _gpu_splits(gpus, long_share) == expected


def test_gpu_splits_leave_each_deployment_a_gpu_and_hold_the_proportional_one() -> None:
    for gpus in range(2, 17):
        for share in np.linspace(0.0, 1.0, 21):
            options = _gpu_splits(gpus, float(share))
            assert options == sorted(set(options))
            assert all(1 <= g <= gpus - 1 for g in options), (gpus, share, options)
            proportional = min(max(round(gpus * share), 1), gpus - 1)
            assert proportional in options, (gpus, share, options)


# ---------------------------------------------------------------------------------------------
# Which segments go long, and the threshold


@pytest.mark.parametrize(("p50s", "expected"), [
    ([200, 7_000], (1_183, [1], [0])),  # √(200 × 7,000) = 1,183.2
    ([7_000, 200], (1_183, [0], [1])),  # the order of the segments does not matter
    ([300, 5_000, 900], (2_121, [1], [0, 2])),  # vs the next longest: √(900 × 5,000) = 2,121.3
    ([1_000, 4_000], (2_000, [1], [0])),  # exactly MIN_INPUT_RATIO apart: split
    ([0, 50], (7, [1], [0])),  # a median of 0 counts as 1 token: √50 = 7.07
])
def test_split_puts_the_longest_segment_apart_at_the_geometric_mean(bimodal, p50s, expected):
    assert MIN_INPUT_RATIO == 4.0  # the cases above are worked out for this ratio
    assert _split(_with_segments(bimodal[0], p50s)) == expected


@pytest.mark.parametrize(("p50s", "gpus"), [
    ([1_000, 3_999], GPUS),  # just under 4× apart
    ([300, 5_000, 1_300], GPUS),  # 5,000 is under 4× the next longest (1,300)
    ([7_000], GPUS),  # one segment
    ([200, 7_000], 1),  # one GPU cannot be split
])
def test_no_split_when_segments_are_close_or_nothing_to_split(bimodal, p50s, gpus):
    assert _split(_with_segments(bimodal[0], p50s, gpus)) is None


# ---------------------------------------------------------------------------------------------
# plan_routing on real profiles


def test_no_plan_when_segments_differ_in_output_only(same_inputs):
    segs = same_inputs.profile.segments
    assert len(segs) >= 2  # the profile did find the two populations
    p50s = sorted((s.input_tokens_p50 for s in segs), reverse=True)
    assert p50s[0] < MIN_INPUT_RATIO * p50s[1]
    assert plan_routing(same_inputs) is None


def test_plan_routes_the_long_prompts_by_a_threshold_between_the_populations(bimodal):
    ctx, is_long = bimodal
    inputs = ctx.workload.requests.input_tokens  # the trace's rows, in arrival order
    plan = plan_routing(ctx)
    assert plan is not None
    short, long_ = plan.deployments
    (short_op, threshold), (long_op, long_threshold) = _rule(short.criteria), _rule(long_.criteria)
    assert (short_op, long_op) == ("<", ">=") and threshold == long_threshold
    # The threshold lies between the populations, so the rule sends exactly the long ones.
    assert inputs[~is_long].max() < threshold <= inputs[is_long].min()
    assert np.array_equal(inputs >= threshold, is_long)
    assert short.share == pytest.approx(1 - is_long.mean())
    assert long_.share == pytest.approx(is_long.mean())
    # The long deployment serves the profile's long segment, the short one every other one.
    segs = ctx.profile.segments
    assert [segs[i].input_tokens_p50 >= 12_000 for i in long_.segments] == [True]
    assert all(segs[i].input_tokens_p50 < 300 for i in short.segments)
    assert sorted(short.segments + long_.segments) == list(range(len(segs)))
    assert short.gpus + long_.gpus == GPUS
    assert plan.gain_text.startswith("two routed deployments")
    assert f"on the same {GPUS} GPUs" in plan.gain_text
