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

from recommender.catalog.facts import hardware_facts
from recommender.decision.goals import Target
from recommender.decision.recommendation import RoutedDeployment, RoutingPlan
from recommender.decision.scoring import Evaluation, latency_s
from recommender.decision.search import search
from recommender.sim.trace_window import head_window, take

if TYPE_CHECKING:
    from recommender.decision.explanation.context import Context

MIN_INPUT_RATIO = 4.0
MIN_GAIN = 0.05  # 5 % more goodput, or
LATENCY_GAIN = 0.10  # 10 % lower p95 request time at the same goodput
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
    best: tuple[float, list[RoutedDeployment], str] | None = None
    for long_gpus in _gpu_splits(ctx.target.gpus, share_tokens):
        parts = [(np.flatnonzero(~is_long), ctx.target.gpus - long_gpus, short_segments,
                  f"input_tokens < {threshold:,}"),
                 (np.flatnonzero(is_long), long_gpus, long_segments,
                  f"input_tokens >= {threshold:,}")]
        plan = _evaluate_split(ctx, parts)
        if plan is not None and (best is None or plan[0] > best[0]):
            best = plan
    if best is None:
        return None
    return RoutingPlan(deployments=best[1], gain_text=best[2])


def _gpu_splits(gpus: int, long_share: float) -> list[int]:
    """GPUs for the long-prompt deployment: in proportion to its tokens, and the powers of
    two either side (tensor parallelism wants them)."""
    prop = min(max(round(gpus * long_share), 1), gpus - 1)
    low = 2 ** math.floor(math.log2(prop))
    options = {prop, low, low * 2, gpus - low, gpus - low * 2}
    return sorted(g for g in options if 1 <= g <= gpus - 1)


def _evaluate_split(ctx: Context, parts: list) -> tuple[float, list[RoutedDeployment], str] | None:
    """(goodput, deployments, gain text) of one GPU split when it beats the single pick."""
    req = ctx.workload.requests
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
    if gain is None:
        return None
    return sum(e.predicted.goodput_rps or 0.0 for e, _ in evals), deployments, gain
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
    result = search(part, head_window(part, COARSE_REQUESTS), target, ctx.goals, quick=True,
                    seeds=[ctx.best.config])
    return result.ranked[0] if result.ranked else None


def _gain_text(ctx: Context, evals: list[tuple[Evaluation, int]]) -> str | None:
    """Why the pair beats one deployment, or None. Better means MIN_GAIN more goodput, or
    (as much goodput, to 0.1 %) a request-weighted p95 request time LATENCY_GAIN lower."""
    one = ctx.best.predicted
    mean_out = float(ctx.workload.requests.output_tokens.mean())
    n = sum(count for _, count in evals)
    routed_lat = sum(latency_s(e.predicted, mean_out) * k for e, k in evals) / n
    single_lat = latency_s(one, mean_out)
    routed_good = sum(e.predicted.goodput_rps or 0.0 for e, _ in evals)
    single_good = one.goodput_rps or 0.0
    gpus = ctx.target.gpus
    if routed_good >= single_good * (1 + MIN_GAIN):
        return (f"two routed deployments serve {routed_good:.2f} req/s within the SLOs vs "
                f"{single_good:.2f} for one deployment on the same {gpus} GPUs")
    if routed_good >= single_good * 0.999 and routed_lat <= single_lat * (1 - LATENCY_GAIN):
        return (f"two routed deployments cut the request-weighted p95 request time from "
                f"{single_lat:.2f} s to {routed_lat:.2f} s at the same goodput "
                f"({routed_good:.2f} req/s) on the same {gpus} GPUs")
    return None
