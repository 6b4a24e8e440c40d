"""`recommend`: the one entry point from a trace (or profile.json) to a `Recommendation`.

Owns the orchestration: catalog lookups, profiling and the simulated window (a trace's own
requests, or a synthetic trace with a profile.json's shape), the search, the explanation,
warnings and routing, and the export view the `export` command packages.
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
from core.figures import LATENCIES
from engines.config import EngineConfig
from engines.export import ExportRequest
from profiler.analysis.profile import profile_trace
from profiler.ingestion.options import IngestOptions
from profiler.schema import Profile
from profiler.workspace import Workspace
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.capacity import (
    BoundarySearch,
    Setting,
    SizedDeployment,
    TraceRates,
    boundary_of,
    plan_capacity,
    search_boundary,
)
from recommender.decision.decide import Contender, decide
from recommender.decision.fleet import plan_day
from recommender.decision.pricing import apply_prices, price_of
from recommender.decision.reasons import Context, explain, warn
from recommender.decision.recommendation import (
    UNSERVABLE,
    Candidate,
    Decision,
    PredictedMetrics,
    Recommendation,
    RecommendRequest,
)
from recommender.decision.routing import plan_routing
from recommender.decision.scoring import (
    SANE_TPOT_S,
    SANE_TTFT_S,
    Evaluation,
    Goals,
    Target,
    pareto_flags,
)
from recommender.decision.search import COARSE_REQUESTS, SearchResult, search
from recommender.model.params import load_params
from recommender.sim.trace_window import (
    Workload,
    head_window,
    load_parquet_workload,
    load_workload,
)

Progress = Callable[[float, str], None]
# Candidates per engine whose SLO boundary is searched for the decision: at today's load the
# search's score ties most of them (all keep up), and an engine's first by that score need
# not hold the most (a speculative config that wins at today's load can lose at twice it).
CONTENDERS_PER_ENGINE = 2
PROFILE_SNIFF_BYTES = 4096


def recommend(request: RecommendRequest, *, workspace: Workspace | None = None,
              progress: Progress | None = None) -> Recommendation:
    """Rank engines and configurations for the request's trace, GPU and model.

    A trace is ingested into `workspace` (a temporary one when None) and its own requests
    are simulated; a profile.json gets a synthetic trace with its shape (said in `window`
    and the warnings).

    Raises:
        UnknownCatalogEntryError: the GPU or model is not in the catalog.
        ServeFitError: the trace or profile cannot be read, or nothing fits on the GPUs.
    """
    start = time.perf_counter()
    gpu, model = get_gpu(request.gpu), get_model(request.model)
    target = Target(gpu, model, request.gpus, hardware_facts(gpu, request.gpus),
                    model_facts(model), load_params())
    _tell(progress, 0.0, "profiling the trace")
    with tempfile.TemporaryDirectory(prefix="servefit-rec-") as tmp:
        profile, workload, synthetic = _load(request, workspace, Path(tmp))
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
    rec.export = export_view(rec, profile_source=request.source)
    rec.search_time_s = time.perf_counter() - start
    _tell(progress, 1.0, "done")
    return rec


def _assemble(ctx: Context, progress: Progress | None) -> Recommendation:
    """The ranked candidates with reasons, warnings and routing (export view left empty)."""
    ranked = ctx.result.ranked
    flags = pareto_flags(ranked, float(np.mean(ctx.workload.requests.output_tokens)))
    candidates = [_candidate(e, f) for e, f in zip(ranked, flags, strict=True)]
    _tell(progress, 0.8, "explaining the pick")
    reasons, warnings = explain(ctx), warn(ctx)
    _tell(progress, 0.9, "routing plan")
    routing = plan_routing(ctx)
    return Recommendation(
        request=ctx.request, gpu=ctx.target.gpu.name, gpus=ranked[0].gpus,
        model=ctx.target.model.name, pick=candidates[0],
        alternatives=_alternatives(candidates), candidates=candidates, reasons=reasons,
        warnings=warnings, routing=routing,
        window=_window_text(ctx.workload, ctx.synthetic, ctx.goals, ranked[0]),
        search_time_s=0.0, candidates_simulated=ctx.result.simulated, export={},
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


def _load(request: RecommendRequest, workspace: Workspace | None, tmp: Path
          ) -> tuple[Profile, Workload, bool]:
    """(profile, simulated window, synthetic?) for a trace or a profile.json."""
    profile = _read_profile(request.source)
    if profile is None:
        ws = workspace or Workspace(tmp / "workspace.duckdb")
        options = IngestOptions.model_validate(
            {"synthesize_arrivals_rps": request.arrival_rate_rps, "seed": request.seed})
        profile = profile_trace(request.source, workspace=ws, options=options,
                                seed=request.seed)
        if profile.format.arrivals == "undefined":
            raise UsageError(f"{request.source}: the trace has no timestamps; give a request "
                             "rate for Poisson arrivals (--arrival-rate RPS)")
        if profile.mean_qps is None:  # timestamps, but all one instant: no rate to serve
            raise UsageError(f"{request.source}: its {profile.n_requests:,} request(s) arrive "
                             "at one instant (a span of 0 s), so the trace states no rate: "
                             "give a longer stretch of the log, or leave out its time column "
                             "and give a rate (--arrival-rate RPS)")
        return profile, load_workload(ws, max_requests=request.max_requests), False
    from profiler.synthesis.synth import synthesize

    out = tmp / "synthetic.parquet"
    n = min(request.max_requests, max(profile.n_requests, 1))
    if profile.mean_qps is None and request.arrival_rate_rps is None:
        raise UsageError(f"{request.source}: the profile has no arrival times; give a "
                         "request rate for Poisson arrivals (--arrival-rate RPS)")
    synthesize(profile, n_requests=n, out_path=str(out), seed=request.seed,
               rate_rps=request.arrival_rate_rps if profile.mean_qps is None else None)
    workload = load_parquet_workload(str(out), max_requests=request.max_requests)
    workload.description = (f"a synthetic trace of {workload.n:,} requests with the profile's "
                            "shape (a profile.json has no per-request rows)")
    return profile, workload, True


def measured_acceptance(profile: Profile) -> dict[str, float]:
    """Speculative acceptance the trace itself measured, by method (the ngram replay of its
    reply text at ingest); methods not in it keep their published defaults."""
    ngram = profile.format.ngram_acceptance
    return {} if ngram is None else {"ngram": ngram.acceptance}


def _read_profile(source: str) -> Profile | None:
    """The Profile when `source` is a profile.json (a JSON object with `n_requests`)."""
    try:
        with open(source, "rb") as fh:
            head = fh.read(PROFILE_SNIFF_BYTES)
    except OSError:
        return None  # profiling reports the unreadable file
    if not (head.lstrip().startswith(b"{") and b'"n_requests"' in head):
        return None
    from pydantic import ValidationError

    try:
        return Profile.model_validate_json(Path(source).read_text(encoding="utf-8"))
    except (ValidationError, UnicodeDecodeError, OSError) as exc:
        raise UsageError(f"{source}: not a valid profile.json ({str(exc).splitlines()[0]})"
                         ) from None


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


def _alternatives(candidates: list[Candidate]) -> list[Candidate]:
    """Every engine's best candidate, in rank order (the pick first)."""
    seen: set[str] = set()
    out = []
    for c in candidates:
        if c.config.engine not in seen:
            seen.add(c.config.engine)
            out.append(c)
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


def alternative_export(rec: Recommendation, candidate: Candidate) -> dict:
    """`export_view` of another engine's best instead of the pick. The pick's reasons and
    warnings explain the pick, so they do not travel; the report says instead what this
    configuration is to the pick, and by the decision's own figure."""
    if candidate.label == rec.pick.label:
        return rec.export
    other = rec.model_copy(update={"pick": candidate, "reasons": [],
                                   "warnings": [], "capacity": None})
    request = export_view(other, profile_source=rec.request.source)
    request["reasons"] = alternative_reasons(rec, candidate)
    return request


def alternative_reasons(rec: Recommendation, candidate: Candidate) -> list[str]:
    """Why `candidate` is not the pick, in the decision's terms (REPORT.md's Reasons)."""
    lines = [f"Not the pick: {candidate.config.engine}'s best configuration ({candidate.label}), "
             f"exported on request; the pick is {rec.pick.config.engine} {rec.pick.label}."]
    d = rec.decision
    if d is not None and candidate.label in d.figures and d.pick in d.figures:
        tie = " (tied within the prediction's error)" if candidate.label in d.tied_with else ""
        lines.append(f"Ranked by {d.ranked_by}: {d.figures[candidate.label]:.3g} here against "
                     f"{d.figures[d.pick]:.3g} for the pick{tie}.")
    if d is not None:
        lines.append(f"The decision: {d.text}")
    if not candidate.feasible and candidate.rejected_reason:
        lines.append(f"Does not hold today's load: {candidate.rejected_reason}.")
    return lines


def export_view(rec: Recommendation, *, profile_source: str) -> dict:
    """The pick as an `engines.export.ExportRequest`, as JSON (what `export` reads)."""
    p = rec.pick.predicted
    figures: dict[str, float] = {}
    for name in LATENCIES:  # flat `ttft_p95_ms` names: the export report's; no value, no key
        ms = getattr(p, name).ms()
        figures |= {f"{name[:-2]}_{q}_ms": ms[q] for q in ("p50", "p95", "p99")
                    if ms[q] is not None}
    ranges = {f"{name[:-2]}_{q}_ms": (r[0] * 1e3, r[1] * 1e3) for name in LATENCIES
              for q in ("p50", "p95", "p99") if (r := p.interval_range(name, q)) is not None}
    ranges |= {name: r for name in ("output_throughput_tok_s", "total_throughput_tok_s",
                                     "request_throughput_rps")
               if (r := p.interval_range(name)) is not None}
    figures |= {"output_throughput_tok_s": p.output_throughput_tok_s,
                "total_throughput_tok_s": p.total_throughput_tok_s,
                "request_throughput_rps": p.request_throughput_rps,
                "kv_headroom_fraction": p.kv_headroom_fraction}
    if p.goodput_rps is not None:
        figures["goodput_rps"] = p.goodput_rps
    if rec.pick.usd_per_mtok is not None:  # at today's load, at the recommendation's price
        figures["usd_per_mtok_today"] = rec.pick.usd_per_mtok
    gpu, model = get_gpu(rec.gpu), get_model(rec.request.model)
    request = ExportRequest(
        config=rec.pick.config, gpu=rec.gpu, gpu_count=rec.gpus,
        hardware=hardware_facts(gpu, rec.gpus), model_facts=model_facts(model),
        profile=profile_source, predicted=figures, predicted_range=ranges, band=p.band,
        calibration_cell=p.calibration_cell,
        reasons=[r.text for r in rec.reasons], warnings=[w.text for w in rec.warnings],
        not_deployable=next((w.text for w in rec.warnings if w.code == UNSERVABLE), None),
        capacity=rec.capacity,
    )
    return request.model_dump(mode="json")


def _scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    if progress is None:
        return None
    return lambda f, what: progress(lo + (hi - lo) * f, what)


def _tell(progress: Progress | None, fraction: float, what: str) -> None:
    if progress is not None:
        progress(fraction, what)
