"""`recommend`: from a profile and the window of its requests to simulate to a
`Recommendation`, and `recommend_trace`, the same from a trace file or profile.json.

Owns the orchestration: catalog lookups, the search, the decision among each engine's best,
the explanation, warnings, routing, capacity and prices. Reading the source is
`recommender.decision.inputs`'s; the export view, built from the pick on demand, is
`recommender.decision.export_view`'s.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from core.capacity import Capacity
from core.errors import UsageError
from engines.config import EngineConfig
from profiler.schema import Profile
from profiler.workspace import Workspace
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.capacity.boundary import (
    BoundarySearch,
    TraceRates,
    boundary_of,
    search_boundary,
)
from recommender.decision.capacity.fleet import plan_day
from recommender.decision.capacity.plan import plan_capacity
from recommender.decision.capacity.pricing import apply_prices, price_of
from recommender.decision.capacity.trial import Setting, SizedDeployment
from recommender.decision.decide import Contender, decide
from recommender.decision.explanation.caveats import warn
from recommender.decision.explanation.context import Context
from recommender.decision.explanation.reasons import explain
from recommender.decision.goals import SANE_TPOT_S, SANE_TTFT_S, Goals, Target
from recommender.decision.inputs import ingested, read_source
from recommender.decision.recommendation import (
    Candidate,
    Decision,
    PredictedMetrics,
    Recommendation,
    RecommendRequest,
)
from recommender.decision.routing import plan_routing
from recommender.decision.scoring import Evaluation, pareto_flags
from recommender.decision.search import COARSE_REQUESTS, SearchResult, search
from recommender.model.params import load_params
from recommender.sim.trace_window import Workload, head_window

Progress = Callable[[float, str], None]
# Candidates per engine whose SLO boundary is searched for the decision: at today's load the
# search's score ties most of them (all keep up), and an engine's first by that score need
# not hold the most (a speculative config that wins at today's load can lose at twice it).
CONTENDERS_PER_ENGINE = 2


def recommend(profile: Profile, workload: Workload, request: RecommendRequest, *,
              synthetic: bool = False, progress: Progress | None = None) -> Recommendation:
    """Rank engines and configurations for a profiled trace's requests, GPU and model.

    `workload` is the window simulated (`inputs.Inputs`: the trace's own requests, or with
    `synthetic` requests drawn with a profile.json's shape, said in `window` and the
    warnings); requests longer than the model's context are dropped from it.

    Raises:
        UnknownCatalogEntryError: the GPU or model is not in the catalog.
        ServeFitError: nothing fits on the GPUs.
    """
    start = time.perf_counter()
    gpu, model = get_gpu(request.gpu), get_model(request.model)
    target = Target(gpu, model, request.gpus, hardware_facts(gpu, request.gpus),
                    model_facts(model), load_params())
    goals = Goals(request.objective, request.slo_ttft_p95_s, request.slo_tpot_p95_s,
                  measured_acceptance={**measured_acceptance(profile),
                                       **{str(k): v for k, v in request.spec_acceptance.items()}})
    workload.drop_longer_than(model.max_context_tokens)
    coarse = head_window(workload.requests, COARSE_REQUESTS)
    result = search(workload.requests, coarse, target, goals,
                    progress=_scaled(progress, 0.05, 0.75))
    if not result.ranked:
        raise UsageError(_nothing_fits(request, result.pruned))
    _tell(progress, 0.76, "how far each engine's best holds")
    setting, rates = Setting(workload.requests, target, goals), _rates(profile, workload)
    result, decision, searched = _decide(result, setting, rates, request.seed)
    ctx = Context(request=request, profile=profile, workload=workload, target=target,
                  goals=goals, result=result, synthetic=synthetic, decision=decision)
    rec = _assemble(ctx, progress)
    rec.decision = decision
    _tell(progress, 0.92, "how far the pick holds")
    rec.capacity = _capacity(ctx, rec, setting, rates, searched)
    apply_prices(rec, price_of(request, gpu), float(np.mean(workload.requests.output_tokens)))
    rec.search_time_s = time.perf_counter() - start
    _tell(progress, 1.0, "done")
    return rec


def recommend_trace(request: RecommendRequest, *, profile: Profile | None = None,
                    workspace: Workspace | None = None, progress: Progress | None = None
                    ) -> Recommendation:
    """`recommend` for `request.source`. A caller that holds the trace ingested into
    `workspace` and its `profile` (the app) passes both: the trace is not read again, unless
    it has no timestamps and the request gives a rate (then it is read into a temporary
    workspace, leaving the caller's as it was). Otherwise the source is read
    (`inputs.read_source`): a trace ingested into `workspace` (a temporary one when None)
    and profiled, or a profile.json.

    Raises:
        UnknownCatalogEntryError: the GPU or model is not in the catalog.
        ServeFitError: the trace or profile cannot be read, or nothing fits on the GPUs.
    """
    _tell(progress, 0.0, "profiling the trace")
    if profile is not None and workspace is not None and not (
            profile.format.arrivals == "undefined" and request.arrival_rate_rps is not None):
        inputs = ingested(profile, workspace, request)
    else:
        with tempfile.TemporaryDirectory(prefix="servefit-rec-") as tmp:
            inputs = read_source(request, None if profile is not None else workspace,
                                 Path(tmp))
    return recommend(inputs.profile, inputs.workload, request, synthetic=inputs.synthetic,
                     progress=progress)


def _assemble(ctx: Context, progress: Progress | None) -> Recommendation:
    """The ranked candidates with reasons, warnings and routing (the pick first)."""
    ranked = ctx.result.ranked
    flags = pareto_flags(ranked, float(np.mean(ctx.workload.requests.output_tokens)))
    candidates = [_candidate(e, f) for e, f in zip(ranked, flags, strict=True)]
    _tell(progress, 0.8, "explaining the pick")
    reasons, warnings = explain(ctx), warn(ctx)
    _tell(progress, 0.9, "routing plan")
    routing = plan_routing(ctx)
    return Recommendation(
        request=ctx.request, gpu=ctx.target.gpu.name, gpus=ranked[0].gpus,
        model=ctx.target.model.name, candidates=candidates, pick_index=0,
        alternative_indices=_alternatives(candidates), reasons=reasons,
        warnings=warnings, routing=routing,
        window=_window_text(ctx.workload, ctx.synthetic, ctx.goals, ranked[0]),
        search_time_s=0.0, candidates_simulated=ctx.result.simulated,
    )


def _decide(result: SearchResult, setting: Setting, rates: TraceRates, seed: int
            ) -> tuple[SearchResult, Decision, dict[str, BoundarySearch]]:
    """(the result re-ranked by the decision, the decision, the boundary searches by label):
    each engine's first candidates are sized on the trace (`capacity.search_boundary`) and
    the pick decided among them (`decide.decide`); they lead the ranking in the decided
    order, every other candidate follows in the search's."""
    bests = _engine_bests(result.ranked)
    deps = {label(e): _deployment(e.config, e.replicas, label(e), e.predicted) for e in bests}
    searched = {name: search_boundary(setting, dep) for name, dep in deps.items()}
    contenders = [Contender(e, label(e), boundary_of(searched[label(e)], deps[label(e)], rates))
                  for e in bests]
    mean_out = float(np.mean(setting.requests.output_tokens))
    ordered, decision = decide(contenders, setting.goals.objective, mean_out, seed=seed,
                               step_time=setting.target.params.step_time)
    head = [c.evaluation for c in ordered]
    ranked = head + [e for e in result.ranked if all(e is not h for h in head)]
    return replace(result, ranked=ranked), decision, searched


def _engine_bests(ranked: list[Evaluation]) -> list[Evaluation]:
    """Each engine's first CONTENDERS_PER_ENGINE candidates in the search's order."""
    out: list[Evaluation] = []
    for e in ranked:
        if sum(o.config.engine == e.config.engine for o in out) < CONTENDERS_PER_ENGINE:
            out.append(e)
    return out


def _deployment(config: EngineConfig, replicas: int, name: str, predicted: PredictedMetrics
                ) -> SizedDeployment:
    """A candidate to size, with its band and throughput interval (the boundary's range)."""
    return SizedDeployment(config, replicas, name, predicted.band,
                      predicted.intervals.get("throughput"))


def _rates(profile: Profile, workload: Workload) -> TraceRates:
    """The rates boundaries are stated against: today's (the window's), the mean, the peak."""
    today = workload.rate_rps
    peak, window = ((profile.peak_qps_60s, 60.0) if profile.peak_qps_60s
                    else (profile.peak_qps_1s, 1.0))
    return TraceRates(today_rps=today, mean_rps=profile.mean_qps or today, peak_rps=peak,
                      peak_window_s=window if peak else None)


def _capacity(ctx: Context, rec: Recommendation, setting: Setting, rates: TraceRates,
              searched: dict[str, BoundarySearch]) -> Capacity:
    """The pick's and each other engine's SLO boundary on the simulated window, and growth
    (the decision's boundary searches reused)."""
    def dep(c: Candidate) -> SizedDeployment:
        return _deployment(c.config, c.replicas, c.label, c.predicted)

    others = [dep(c) for c in rec.alternatives if c.label != rec.pick.label]
    capacity = plan_capacity(setting, dep(rec.pick), others, rates, searched)
    # the profile's own arrivals over time (a profile.json's too: its rate series is the
    # trace's, only the simulated requests are synthetic)
    capacity.day = plan_day(ctx.profile.rate_series, ctx.profile.duration_s, capacity.pick)
    return capacity


def measured_acceptance(profile: Profile) -> dict[str, float]:
    """Speculative acceptance the trace itself measured, by method (the ngram replay of its
    reply text at ingest); methods not in it keep their published defaults."""
    ngram = profile.format.ngram_acceptance
    return {} if ngram is None else {"ngram": ngram.acceptance}


def _candidate(e: Evaluation, pareto: bool) -> Candidate:
    return Candidate(config=e.config, label=label(e), predicted=e.predicted, score=e.score,
                     feasible=e.feasible, pareto=pareto, rejected_reason=e.rejected_reason,
                     replicas=e.replicas)


def layout_label(c: EngineConfig) -> str:
    """'tp8', 'tep8' (experts over the TP group) or 'dep8' / 'tp2dep8' (attention DP)."""
    if c.dp > 1:
        return f"{f'tp{c.tp}' if c.tp > 1 else ''}dep{c.tp * c.dp}"
    return f"tep{c.tp}" if c.ep > 1 else f"tp{c.tp}"


def label(e: Evaluation) -> str:
    """'vllm tp1×2 fp8 kv-fp8 seqs128 budget8192 chunked-off prefix-on ngram3'."""
    c = e.config
    parts = [c.engine, layout_label(c) + (f"×{e.replicas}" if e.replicas > 1 else "")]
    parts.append(c.weight_quantization or "bf16")
    if c.kv_cache_dtype != "auto":
        parts.append(f"kv-{c.kv_cache_dtype}")
    if c.max_num_seqs:
        parts.append(f"seqs{c.max_num_seqs}")
    if c.max_batched_tokens:
        parts.append(f"budget{c.max_batched_tokens}")
    if c.chunked_prefill is not None:
        parts.append("chunked-" + ("on" if c.chunked_prefill else "off"))
    if c.prefix_caching is not None:
        parts.append("prefix-" + ("on" if c.prefix_caching else "off"))
    if c.speculative is not None:
        parts.append(f"{c.speculative.method}{c.speculative.num_tokens}")
    return " ".join(parts)


def _alternatives(candidates: list[Candidate]) -> list[int]:
    """The index of every engine's best candidate, in rank order (the pick first)."""
    seen: set[str] = set()
    out = []
    for i, c in enumerate(candidates):
        if c.config.engine not in seen:
            seen.add(c.config.engine)
            out.append(i)
    return out


def _window_text(workload: Workload, synthetic: bool, goals: Goals, best: Evaluation) -> str:
    text = workload.description
    text += f"; {workload.rate_rps:.2f} req/s offered over {workload.duration_s:,.0f} s"
    if best.replicas > 1:
        text += (f"; arrivals dealt round-robin over {best.replicas} replicas, replica 0 "
                 "simulated and its throughput multiplied")
    if not goals.has_slo:
        text += (f"; no SLO given: goodput counts requests with TTFT <= {SANE_TTFT_S:g} s and "
                 f"TPOT <= {SANE_TPOT_S * 1e3:g} ms")
    return text


def _nothing_fits(request: RecommendRequest, pruned: dict[str, int]) -> str:
    top = sorted(pruned.items(), key=lambda kv: -kv[1])[:2]
    why = "; ".join(f"{reason} ({n} configs)" for reason, n in top) or "no candidate"
    return (f"no configuration of {request.model} fits on {request.gpus}× {request.gpu}: "
            f"{why}; add GPUs or pick a bigger GPU")


def _scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    if progress is None:
        return None
    return lambda f, what: progress(lo + (hi - lo) * f, what)


def _tell(progress: Progress | None, fraction: float, what: str) -> None:
    if progress is not None:
        progress(fraction, what)
