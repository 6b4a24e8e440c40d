"""Routing advice: two deployments, each serving part of the traffic, versus one.

When the profile's length segments differ a lot (the longest-prompt segment's median input
at least `MIN_INPUT_RATIO`× the next one's), requests are split by a rule a router can apply
(input_tokens ≥ a threshold between the two medians), the GPUs are split in proportion to
each part's tokens, each part gets a quick search of its own, and the pair is proposed when
it serves the window's traffic better than the single pick by a margin.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from recommender.facts import hardware_facts
from recommender.recommendation import RoutedDeployment, RoutingPlan
from recommender.scoring import Evaluation, latency_s
from recommender.search import Target, search
from recommender.workload import head_window, take

if TYPE_CHECKING:
    from recommender.reasons import Context

MIN_INPUT_RATIO = 4.0
MIN_GAIN = 0.05  # 5 % more goodput (or lower p95 request time for the latency objective)
COARSE_REQUESTS = 1000


def plan_routing(ctx: Context) -> RoutingPlan | None:
    """Two routed deployments when they beat the pick by MIN_GAIN, else None."""
    split = _split(ctx)
    if split is None:
        return None
    threshold, long_segments, short_segments = split
    req = ctx.workload.requests
    is_long = req.input_tokens >= threshold
    if is_long.all() or not is_long.any():
        return None
    tokens = (req.input_tokens + req.output_tokens).astype(np.float64)
    share_tokens = float(tokens[is_long].sum() / tokens.sum())
    long_gpus = min(max(round(ctx.target.gpus * share_tokens), 1), ctx.target.gpus - 1)
    parts = [(np.flatnonzero(~is_long), ctx.target.gpus - long_gpus, short_segments,
              f"input_tokens < {threshold:,}"),
             (np.flatnonzero(is_long), long_gpus, long_segments,
              f"input_tokens >= {threshold:,}")]
    deployments, evals = [], []
    for index, gpus, segments, rule in parts:
        best = _best_for(ctx, index, gpus)
        if best is None:
            return None
        evals.append((best, len(index)))
        deployments.append(RoutedDeployment(
            segments=segments, criteria=rule, share=len(index) / len(req.arrival_s),
            gpus=best.gpus, config=best.config, predicted=best.predicted))
    gain = _gain_text(ctx, evals)
    return None if gain is None else RoutingPlan(deployments=deployments, gain_text=gain)


def _split(ctx: Context) -> tuple[int, list[int], list[int]] | None:
    """(input threshold, long segment indices, the others) when the segments differ enough."""
    segs = ctx.profile.segments
    if ctx.target.gpus < 2 or len(segs) < 2:
        return None
    order = sorted(range(len(segs)), key=lambda i: -segs[i].input_tokens_p50)
    top, second = segs[order[0]].input_tokens_p50, segs[order[1]].input_tokens_p50
    if top < MIN_INPUT_RATIO * max(second, 1.0):
        return None
    threshold = round(math.sqrt(top * max(second, 1.0)))
    return threshold, [order[0]], sorted(order[1:])


def _best_for(ctx: Context, index: np.ndarray, gpus: int) -> Evaluation | None:
    t = ctx.target
    target = Target(t.gpu, t.model, gpus, hardware_facts(t.gpu, gpus), t.model_facts, t.params)
    part = take(ctx.workload.requests, index, rebase=False)
    result = search(part, head_window(part, COARSE_REQUESTS), target, ctx.goals, quick=True)
    return result.ranked[0] if result.ranked else None


def _gain_text(ctx: Context, evals: list[tuple[Evaluation, int]]) -> str | None:
    one = ctx.best.predicted
    mean_out = float(ctx.workload.requests.output_tokens.mean())
    n = sum(count for _, count in evals)
    if ctx.goals.objective == "latency":
        routed = sum(latency_s(e.predicted, mean_out) * k for e, k in evals) / n
        single = latency_s(one, mean_out)
        if routed > single * (1 - MIN_GAIN):
            return None
        return (f"two routed deployments cut the request-weighted p95 request time from "
                f"{single:.2f} s to {routed:.2f} s on the same {ctx.target.gpus} GPUs")
    routed_good = sum(e.predicted.goodput_rps or 0.0 for e, _ in evals)
    single_good = one.goodput_rps or 0.0
    if routed_good < single_good * (1 + MIN_GAIN):
        return None
    return (f"two routed deployments serve {routed_good:.2f} req/s within the SLOs vs "
            f"{single_good:.2f} for one deployment on the same {ctx.target.gpus} GPUs")
