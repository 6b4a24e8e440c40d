"""One candidate's simulation, its predicted figures, and its score under the objective.

Owns the objectives' definitions (goodput, latency, cost), the "keeps up" rule, the
latency figure the latency objective minimises, the Pareto front, and each candidate's
calibration cell and error band (`with_band`). Replicas: arrivals
are dealt round-robin over the scheduler replicas (instances × their attention DP ranks, as
the engines' DP routers deal them) and replica 0 is simulated; its throughputs are
multiplied by the replica count, its latencies stand for all replicas. The target and goals
a candidate is scored for are `goals`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines.config import EngineConfig
from recommender.calibration.bands import intervals_of
from recommender.calibration.bands_file import BANDS_FILE, cell_band
from recommender.calibration.cells import cell_of, replay_regime
from recommender.decision.goals import Goals, Target
from recommender.decision.recommendation import PredictedMetrics
from recommender.sim.result import SimResult, SimSummary
from recommender.sim.simulator import SimRequests, simulate
from recommender.sim.trace_window import replica_share

# Quality-affecting weight formats must earn their place: the goodput share must be 2 points
# higher, the latency 10 % lower, the goodput per GPU 5 % higher than without the penalty.
QUALITY_FORMATS = frozenset({"int4", "awq", "gptq", "nvfp4", "mxfp4"})
QUALITY_PENALTY = {"goodput": 0.02, "latency": 0.10, "cost": 0.05}

# Every knob set away from the engine default must buy 1 % of latency (goodput and latency
# objectives) or 0.1 % goodput per GPU (cost): near ties go to the plainer config.
KNOB_COST = {"goodput": 0.01, "latency": 0.01, "cost": 0.001}

# A p95 latency with no value (no request completed) counts as this many seconds in the
# latency objective and the Pareto front: worse than any served candidate, and finite so
# scores stay comparable numbers (and valid JSON).
UNSERVED_LATENCY_S = 1e9
KEEP_UP_SHARE = 0.95  # completed req/s must reach 95 % of the offered rate
MAX_REJECTED_SHARE = 0.01


@dataclass(slots=True)
class Evaluation:
    """One config simulated on one window with its figures and score."""

    config: EngineConfig
    replicas: int
    predicted: PredictedMetrics
    offered_rps: float
    score: float
    feasible: bool
    rejected_reason: str | None

    @property
    def gpus(self) -> int:
        return self.replicas * self.config.gpus_per_instance


def latency_s(predicted: PredictedMetrics, mean_output_tokens: float) -> float:
    """The latency objective: p95 TTFT + p95 TPOT × (mean output tokens − 1), a p95-ish
    request time that weighs the first token and the stream as a user sees them. A figure
    with no value counts as UNSERVED_LATENCY_S (ranks worst)."""
    ttft, tpot = predicted.ttft_s.p95, predicted.tpot_s.p95
    ttft = UNSERVED_LATENCY_S if ttft is None else ttft
    tpot = UNSERVED_LATENCY_S if tpot is None else tpot
    return ttft + tpot * max(mean_output_tokens - 1.0, 0.0)


def evaluate(config: EngineConfig, requests: SimRequests, replicas: int, target: Target,
             goals: Goals) -> Evaluation:
    """Simulate `config` with `replicas` copies on `requests` and score it.

    Raises:
        UsageError: the simulator refuses (config does not fit, nothing schedulable).
    """
    ranks = replicas * config.dp  # one simulated scheduler per attention DP rank
    share = replica_share(requests, ranks)
    result = simulate(share, config, target.gpu, target.model, params=target.params,
                      options=goals.sim_options())
    predicted = with_band(predicted_metrics(result, ranks, goals), config.engine, ranks,
                          target)
    span = float(requests.arrival_s[-1] - requests.arrival_s[0])
    offered = len(requests.arrival_s) / span if span > 0 else float(len(requests.arrival_s))
    mean_out = float(np.mean(requests.output_tokens))
    served = served_rps(result.summary, span) * ranks if span > 0 else offered
    reason = _infeasible(predicted, offered, served, len(share.arrival_s), goals)
    score = _score(predicted, offered, mean_out, replicas * config.gpus_per_instance, goals,
                   feasible=reason is None,
                   quality_cost=config.weight_quantization in QUALITY_FORMATS,
                   knobs=knobs_set(config))
    return Evaluation(config, replicas, predicted, offered, score, reason is None, reason)


def predicted_metrics(result: SimResult, replicas: int, goals: Goals) -> PredictedMetrics:
    """The simulator's summary as PredictedMetrics over all replicas."""
    s = result.summary
    slo_met = True
    if goals.slo_ttft_s is not None:
        slo_met &= _ok(s.ttft_s.p95, goals.slo_ttft_s)
    if goals.slo_tpot_s is not None:
        slo_met &= _ok(s.tpot_s.p95, goals.slo_tpot_s)
    peak = float(np.max(result.kv_usage)) if result.kv_usage.size else 0.0
    return PredictedMetrics(
        ttft_s=s.ttft_s, tpot_s=s.tpot_s, itl_s=s.itl_s, e2e_s=s.e2e_s,
        output_throughput_tok_s=s.output_throughput_tok_s * replicas,
        total_throughput_tok_s=s.total_throughput_tok_s * replicas,
        request_throughput_rps=s.request_throughput_rps * replicas,
        goodput_rps=None if s.goodput_rps is None else s.goodput_rps * replicas,
        kv_headroom_fraction=max(0.0, 1.0 - peak), slo_met=bool(slo_met),
        rejected_requests=s.rejected * replicas, preemptions=s.preemptions * replicas,
    )


def with_band(predicted: PredictedMetrics, engine: str, replicas: int, target: Target
              ) -> PredictedMetrics:
    """`predicted` with its calibration cell and that cell's band (None outside every
    calibrated cell). The replay is open-loop: its regime is the closed loop at one replica's
    mean occupancy (`cells.replay_regime`). A cached dict lookup per candidate."""
    regime = replay_regime(predicted.request_throughput_rps / replicas, predicted.e2e_s.mean)
    cell = cell_of(engine, target.gpu, target.model, regime)
    intervals, _ = intervals_of(engine, target.gpu, target.model, regime,
                                bands_file=BANDS_FILE, step_time=target.params.step_time,
                                engine_version=None)
    return predicted.model_copy(update={
        "calibration_cell": cell, "band": cell_band(cell, kind=target.params.step_time),
        "intervals": intervals})


def knobs_set(config: EngineConfig) -> int:
    """Scheduler and format knobs set away from the engine defaults (the score's knob cost;
    max_model_len and the memory fraction are set for every candidate and not counted)."""
    flags = (config.max_num_seqs, config.max_batched_tokens, config.chunked_prefill,
             config.prefix_caching, config.speculative, config.weight_quantization)
    return sum(v is not None for v in flags) + (config.kv_cache_dtype != "auto")


def _ok(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


def served_rps(summary: SimSummary, span_s: float) -> float:
    """Requests/s a run served while its requests arrived over `span_s` (> 0): completions
    over the span, or over the makespan less one median request where it ran longer. A
    finite window's last arrivals are still served after the span ends, which over a few
    requests alone looks like falling behind (10 requests over 9 s, a 1 s median request:
    10/10 s of 10/9 offered); a queue that grows leaves a backlog far longer than one
    request, and the rate stays short of the offered one."""
    tail = summary.e2e_s.p50 or 0.0
    return summary.completed / max(summary.makespan_s - tail, span_s)


def _infeasible(p: PredictedMetrics, offered: float, served: float, n: int, goals: Goals
                ) -> str | None:
    if p.rejected_requests > MAX_REJECTED_SHARE * n:
        return f"{p.rejected_requests} requests can never be served (KV pool or budget)"
    if served < KEEP_UP_SHARE * offered:
        return f"falls behind: serves {served:.2f} req/s of {offered:.2f} offered"
    if goals.objective != "goodput" and not p.slo_met:
        return "misses the p95 SLO"
    return None


def _score(p: PredictedMetrics, offered: float, mean_out: float, gpus: int, goals: Goals,
           *, feasible: bool, quality_cost: bool, knobs: int) -> float:
    """Higher is better. goodput: share of the offered load served within the SLOs (or the
    sane limits), 3 decimals, ties broken by lower latency; latency: −latency_s, feasible
    first; cost: goodput per GPU, feasible first. Quality-affecting weights pay
    QUALITY_PENALTY, every knob set KNOB_COST."""
    penalty = QUALITY_PENALTY[goals.objective] if quality_cost else 0.0
    if goals.objective == "cost":
        penalty += KNOB_COST["cost"] * knobs
    lat = latency_s(p, mean_out) * (1.0 + KNOB_COST[goals.objective] * knobs)
    good_share = (p.goodput_rps or 0.0) / offered if offered > 0 else 0.0
    tie = 1e-3 / (1.0 + lat)
    if goals.objective == "goodput":
        return round(min(good_share, 1.0), 3) - penalty + tie
    if goals.objective == "latency":
        return -lat * (1.0 + penalty) - (0.0 if feasible else 1e6)
    per_gpu = (p.goodput_rps or 0.0) / gpus * (1.0 - penalty)
    return per_gpu + tie - (0.0 if feasible else 1e6)


def pareto_flags(evals: list[Evaluation], mean_out: float) -> list[bool]:
    """True where no other candidate has goodput ≥ and latency ≤ with one strictly better."""
    pts = [((e.predicted.goodput_rps or 0.0) / e.gpus, latency_s(e.predicted, mean_out))
           for e in evals]
    flags = []
    for g, lat in pts:
        dominated = any(g2 >= g and l2 <= lat and (g2 > g or l2 < lat) for g2, l2 in pts)
        flags.append(not dominated)
    return flags
