"""Why the pick, and what to watch: reasons tied to profile figures, and warnings.

Every reason that claims an effect is backed by a counterfactual simulation (the pick with
that one knob back at its alternative) on the same window. Warnings cover the calibrated
range (data/calibration: which models, GPUs, engines and lengths the fit saw, its held-out
error, and a pick whose calibration cell no published measurement covers), OOM risk
(`memory.plan_memory`), SLOs this hardware cannot meet (with a quick search on twice the GPUs
and on the next bigger GPU), and what was not simulated.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import ServeFitError, UsageError
from engines.config import EngineConfig
from engines.registry import ENGINES
from profiler.schema import Profile
from recommender.calibration.bands_file import BANDS_FILE, band_of_prediction, load_bands
from recommender.catalog.lookup import get_model, load_gpus
from recommender.catalog.specs import GPU
from recommender.decision.recommendation import (
    UNSERVABLE,
    Decision,
    Reason,
    RecommendRequest,
    RecWarning,
)
from recommender.decision.scoring import Evaluation, Goals, Target, evaluate
from recommender.decision.search import SearchResult, search
from recommender.model.defaults import scheduler_caps
from recommender.model.memory import WEIGHT_BYTES_PER_PARAM, plan_memory
from recommender.model.speculative import ACCEPTANCE_DEFAULTS
from recommender.sim.simulator import unservable_counts
from recommender.sim.trace_window import Workload, head_window

HELD_OUT_ERROR_WARN_PCT = 25.0
LONG_CONTEXT_TOKENS = 32_000  # DESIGN §4.6: disaggregation pays off above ~32K at volume
QUALITY_FORMATS = {"awq": "4-bit AWQ", "gptq": "4-bit GPTQ", "int4": "4-bit",
                   "nvfp4": "NVFP4", "mxfp4": "MXFP4"}


@dataclass(slots=True)
class Context:
    """Everything explanations and warnings look at."""

    request: RecommendRequest
    profile: Profile
    workload: Workload
    target: Target
    goals: Goals
    result: SearchResult
    synthetic: bool
    decision: Decision | None = None  # how the pick was chosen (recommender.decision.decide)

    @property
    def best(self) -> Evaluation:
        return self.result.ranked[0]

    def what_if(self, **update: object) -> Evaluation | None:
        """The pick with `update` applied, simulated on the same window (None: cannot run)."""
        config = self.best.config.model_copy(update=update)
        if config == self.best.config:
            return None
        seen = self.result.full.get((config.model_dump_json(), self.best.replicas))
        if seen is not None:
            return seen
        try:
            return evaluate(config, self.workload.requests, self.best.replicas, self.target,
                            self.goals)
        except UsageError:
            return None


def _ms(seconds: float | None) -> str:
    """A latency in ms; "never" where it has no value (no request completed)."""
    return "never" if seconds is None else f"{seconds * 1e3:,.0f} ms"


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f} s"


def _cmp(name: str, a: Evaluation, b: Evaluation) -> str:
    """'p95 TTFT 120 ms (vs 480 ms)' for the figure `name` ('ttft' or 'tpot')."""
    x, y = getattr(a.predicted, f"{name}_s").p95, getattr(b.predicted, f"{name}_s").p95
    return f"p95 {name.upper()} {_ms(x)} (vs {_ms(y)})"


def _effect(ctx: Context, a: Evaluation, b: Evaluation) -> str:
    """The pick against its counterfactual: the objective's latency, p95 TTFT and TPOT, and
    requests that could not be served."""
    text = (f"p95 E2E {_s(a.predicted.e2e_s.p95)} (vs {_s(b.predicted.e2e_s.p95)}), "
            f"{_cmp('ttft', a, b)}, {_cmp('tpot', a, b)}")
    ra, rb = a.predicted.rejected_requests, b.predicted.rejected_requests
    if ra != rb:
        text += f", {ra} unservable requests (vs {rb})"
    return text


def explain(ctx: Context) -> list[Reason]:
    """The reasons for the pick, most important first."""
    out: list[Reason] = [] if ctx.decision is None else [_decision_reason(ctx.decision)]
    out.append(_engine_reason(ctx))
    for make in (_len_reason, _seqs_reason, _chunk_reason, _prefix_reason, _kv_reason,
                 _weights_reason, _spec_reason, _tp_reason):
        reason = make(ctx)
        if reason is not None:
            out.append(reason)
    return out


def _decision_reason(decision: Decision) -> Reason:
    """What decided the pick: a clear lead on the objective's figure, or a tie and its rule."""
    return Reason(text=decision.text, figure=f"decision.{decision.rule}",
                  value=decision.figures.get(decision.pick))


def _engine_reason(ctx: Context) -> Reason:
    best, p = ctx.best, ctx.profile
    others = [e for e in ctx.result.ranked if e.config.engine != best.config.engine]
    text = f"{best.config.engine} ranks first for the {ctx.goals.objective} objective"
    if others:
        runner = others[0]
        text += (f" at {p.mean_qps or 0:.2f} req/s mean: {_cmp('ttft', best, runner)} and "
                 f"p95 E2E {_s(best.predicted.e2e_s.p95)} vs "
                 f"{_s(runner.predicted.e2e_s.p95)} for the best "
                 f"{runner.config.engine} config")
    return Reason(text=text, figure="mean_qps", value=p.mean_qps)


def _len_reason(ctx: Context) -> Reason | None:
    req = ctx.workload.requests
    longest = int((req.input_tokens + req.output_tokens).max())
    length = ctx.best.config.max_model_len
    if length is None:
        return None
    top = ctx.profile.input_tokens.max
    return Reason(
        text=f"longest simulated request {longest:,} tokens, prompt + output "
             f"(input_tokens.max {top:,.0f})"
             f" → max_model_len {length:,}" + (
                 f", so the KV pool is not sized for the model's full "
                 f"{ctx.target.model.max_context_tokens:,}-token context"
                 if length < ctx.target.model.max_context_tokens else
                 " (the model's full context)"),
        figure="input_tokens.max", value=ctx.profile.input_tokens.max)


def _knob(config: EngineConfig, name: str) -> bool:
    """A boolean knob's value, the engine plug-in's default when unset."""
    value = getattr(config, name)
    return bool(getattr(ENGINES[config.engine].defaults, name) if value is None else value)


def _seqs_reason(ctx: Context) -> Reason | None:
    cap = ctx.best.config.max_num_seqs
    if cap is None:
        return None
    alt = ctx.what_if(max_num_seqs=None)
    effect = f": {_effect(ctx, ctx.best, alt)} with the engine default" if alt else ""
    return Reason(
        text=f"peak_to_mean_60s {ctx.profile.peak_to_mean_60s or 0:.2f} → max_num_seqs capped "
             f"at {cap} below the knee{effect}",
        figure="peak_to_mean_60s", value=ctx.profile.peak_to_mean_60s)


def _chunk_reason(ctx: Context) -> Reason | None:
    config, p99 = ctx.best.config, ctx.profile.input_tokens.p99
    chunked = _knob(config, "chunked_prefill")
    alt = ctx.what_if(chunked_prefill=not chunked)
    if alt is None:
        return None
    budget = (f"budget {config.max_batched_tokens:,}" if config.max_batched_tokens
              else f"{config.engine}'s default budget")
    effect = f"{_effect(ctx, ctx.best, alt)} with it {'off' if chunked else 'on'}"
    if chunked:
        return Reason(text=f"p99 input {p99:,.0f} tokens → chunked prefill with {budget}: "
                           f"{effect}", figure="input_tokens.p99", value=p99)
    longest = ctx.profile.input_tokens.max
    return Reason(text=f"longest prompt {longest:,.0f} tokens → chunked prefill off with "
                       f"{budget}, which takes any prompt in one step: {effect}",
                  figure="input_tokens.max", value=longest)


def _prefix_reason(ctx: Context) -> Reason | None:
    reuse = ctx.profile.prefix_reuse_infinite
    if not ctx.workload.has_hashes or reuse is None:
        return None
    on = _knob(ctx.best.config, "prefix_caching")
    alt = ctx.what_if(prefix_caching=not on)
    if alt is None:
        return None
    ttft, alt_ttft = ctx.best.predicted.ttft_s.p95, alt.predicted.ttft_s.p95
    verb = "(caching would not help):"
    if on:
        verb = ("cuts" if ttft is not None and (alt_ttft is None or ttft < alt_ttft)
                else "changes little:")
    return Reason(text=f"prefix reuse {reuse:.0%} (prefix_reuse_infinite) → prefix caching "
                       f"{'on' if on else 'off'} {verb} {_effect(ctx, ctx.best, alt)} "
                       f"with it {'off' if on else 'on'}",
                  figure="prefix_reuse_infinite", value=reuse)


def _kv_reason(ctx: Context) -> Reason | None:
    if ctx.best.config.kv_cache_dtype == "auto":
        return None
    alt = ctx.what_if(kv_cache_dtype="auto")
    head = ctx.best.predicted.kv_headroom_fraction
    tail = (f"; with a bf16 KV cache {_effect(ctx, ctx.best, alt)}, KV headroom "
            f"{alt.predicted.kv_headroom_fraction:.0%}" if alt else "; bf16 KV does not fit")
    return Reason(text=f"{ctx.best.config.kv_cache_dtype} KV cache doubles the tokens the pool "
                       f"holds: KV headroom at the busiest moment {head:.0%}{tail}",
                  figure="kv_headroom_fraction", value=head)


def _weights_reason(ctx: Context) -> Reason | None:
    quant = ctx.best.config.weight_quantization
    if quant is None or quant == "none":
        return None
    alt = ctx.what_if(weight_quantization=None)
    tail = f": {_effect(ctx, ctx.best, alt)} with bf16 weights" if alt else \
        "; bf16 weights do not fit this deployment"
    p50 = ctx.profile.output_tokens.p50
    share = WEIGHT_BYTES_PER_PARAM[quant] / WEIGHT_BYTES_PER_PARAM["bf16"]
    return Reason(text=f"{quant} weights read {share:.0%} of bf16's bytes per decode step "
                       f"(decode is memory-bound; output_tokens.p50 {p50:,.0f}){tail}",
                  figure="output_tokens.p50", value=p50)


def _spec_reason(ctx: Context) -> Reason | None:
    spec = ctx.best.config.speculative
    if spec is None:
        return None
    alt = ctx.what_if(speculative=None)
    tail = f": {_effect(ctx, ctx.best, alt)} without it" if alt else ""
    return Reason(text=f"speculative decoding ({spec.method}, {spec.num_tokens} tokens) at "
                       f"{ctx.profile.mean_qps or 0:.2f} req/s mean load{tail}; "
                       f"{acceptance_text(ctx.profile, spec.method, ctx.request)}",
                  figure="mean_qps", value=ctx.profile.mean_qps)


def acceptance_text(profile: Profile, method: str,
                    request: RecommendRequest | None = None) -> str:
    """Where the acceptance the prediction took for `method` comes from, in one clause."""
    given = {str(k): v for k, v in request.spec_acceptance.items()}.get(method) \
        if request is not None else None
    if given is not None:
        return (f"acceptance {given:.2f} per token as measured on your deployment (given with "
                "the request: a validation run's engine counters)")
    measured = profile.format.ngram_acceptance
    if method == "ngram" and measured is not None:
        return (f"acceptance {measured.acceptance:.2f} per token measured by replaying prompt "
                f"lookup (n = {measured.ngram_min}-{measured.ngram_max}, k = {measured.k}) over "
                f"the trace's {measured.outputs:,} replies: {measured.tokens_per_step:.2f} "
                "tokens per step")
    d = ACCEPTANCE_DEFAULTS[method]
    return (f"acceptance {d.acceptance:.2f} per token is the method's published default (band "
            f"{d.low:.2f}-{d.high:.2f}); the trace holds no reply text to measure it")


def _tp_reason(ctx: Context) -> Reason | None:
    best = ctx.best
    if ctx.target.gpus == 1 and best.replicas == 1:
        return None
    plan = plan_memory(best.config, ctx.target.gpu, ctx.target.model)
    of = f" of the {ctx.target.gpus} available" if best.gpus < ctx.target.gpus else ""
    c = best.config
    layout = f"tp={c.tp}" + (f", dp={c.dp}" if c.dp > 1 else "") + (
        f", ep={c.ep}" if c.ep > 1 else "")
    return Reason(text=f"{layout} × {best.replicas} replica(s) on {best.gpus} GPUs{of}: "
                       f"{plan.weights_bytes_per_gpu / 1e9:.1f} GB of weights per GPU, "
                       f"{best.predicted.request_throughput_rps:.2f} req/s served of "
                       f"{ctx.profile.peak_qps_60s or 0:.2f} at the 60 s peak",
                  figure="peak_qps_60s", value=ctx.profile.peak_qps_60s)


# ---------------------------------------------------------------------------------------------
# Warnings


def warn(ctx: Context) -> list[RecWarning]:
    """Caveats about the pick, the prediction's footing, and what was not simulated; an
    unservable window first."""
    out: list[RecWarning] = []
    for make in (_unservable_warning, _slo_warning, _oom_warnings, _band_warning,
                 _calibration_warnings, _quality_warning, _workload_warnings,
                 _disaggregation_warning, _feature_warnings):
        out += make(ctx)
    return out


def _slo_warning(ctx: Context) -> list[RecWarning]:
    if not ctx.goals.has_slo or ctx.best.predicted.slo_met:
        return []
    best = ctx.best.predicted
    text = (f"SLO unattainable on {ctx.target.gpus}× {ctx.target.gpu.name}: best p95 TTFT "
            f"{_ms(best.ttft_s.p95)}, p95 TPOT {_ms(best.tpot_s.p95)}. ")
    text += "; ".join(_what_would_attain(ctx))
    return [RecWarning(code="slo_unattainable", text=text)]


def _what_would_attain(ctx: Context) -> list[str]:
    """Quick searches on 2× the GPUs and on the next bigger GPU of the catalog."""
    out = []
    for name, found in _elsewhere(ctx, lambda e: e.predicted.slo_met):
        if found is not None:
            p = found.predicted
            out.append(f"{name} would attain it ({found.config.engine}, p95 TTFT "
                       f"{_ms(p.ttft_s.p95)}, p95 TPOT {_ms(p.tpot_s.p95)})")
        else:
            out.append(f"{name} would not either")
    return out


def _elsewhere(ctx: Context, ok: Callable[[Evaluation], bool]
               ) -> list[tuple[str, Evaluation | None]]:
    """[(hardware, its best candidate that is `ok`, or None)] from quick searches on 2× the
    GPUs and on the next bigger GPU of the catalog, on the same window."""
    from recommender.catalog.facts import hardware_facts

    options: list[tuple[str, Target]] = []
    t = ctx.target
    twice = t.gpus * 2
    options.append((f"{twice}× {t.gpu.name}",
                    Target(t.gpu, t.model, twice, hardware_facts(t.gpu, twice), t.model_facts,
                           t.params)))
    bigger = _next_gpu(t)
    if bigger is not None:
        options.append((f"{t.gpus}× {bigger.name}",
                        Target(bigger, t.model, t.gpus, hardware_facts(bigger, t.gpus),
                               t.model_facts, t.params)))
    coarse = head_window(ctx.workload.requests, 1000)
    out: list[tuple[str, Evaluation | None]] = []
    for name, target in options:
        result = search(ctx.workload.requests, coarse, target, ctx.goals, quick=True)
        out.append((name, next((e for e in result.ranked if ok(e)), None)))
    return out


def _unservable_warning(ctx: Context) -> list[RecWarning]:
    """When the pick cannot serve the window (requests it can never serve, or a load it
    falls behind): how many and why, and what would serve them, each simulated."""
    best = ctx.best
    if best.feasible:
        return []
    req = ctx.workload.requests
    counts = unservable_counts(best.config, ctx.target.gpu, ctx.target.model,
                               req.input_tokens, req.output_tokens)
    if counts:
        n, total = sum(counts.values()), len(req.input_tokens)
        text = (f"{n:,} of {total:,} simulated requests ({n / total:.0%}) can never be "
                f"served by the pick ({best.config.engine}): "
                + "; ".join(_unservable_why(ctx, rule, k) for rule, k in counts.items()))
    else:
        text = f"the pick ({best.config.engine}) cannot serve the window: {best.rejected_reason}"
    serve = _what_would_serve(ctx, counts)
    text += ". What would serve them (each simulated on the same window): " + "; ".join(serve)
    return [RecWarning(code=UNSERVABLE, text=text)]


def _unservable_why(ctx: Context, rule: str, count: int) -> str:
    config, gpu = ctx.best.config, ctx.target.gpu
    if rule == "max_model_len":
        return f"{count:,} are longer than max_model_len {config.max_model_len:,}"
    if rule == "budget":
        budget = scheduler_caps(config, gpu).budget_tokens
        return (f"{count:,} have more tokens than one step's budget ({budget:,}) with "
                "chunked prefill off")
    kv = plan_memory(config, gpu, ctx.target.model).kv_capacity_tokens
    return f"{count:,} need more KV cache than one replica holds ({kv:,} tokens)"


def _what_would_serve(ctx: Context, counts: dict) -> list[str]:
    """The pick with chunked prefill on (and the model's full context when max_model_len
    refused requests), then quick searches on more and bigger GPUs: each simulated."""
    out = []
    changes: list[tuple[str, dict[str, object]]] = []
    if not scheduler_caps(ctx.best.config, ctx.target.gpu).chunked_prefill:
        changes.append(("chunked prefill on", {"chunked_prefill": True}))
    if "max_model_len" in counts:
        full = ctx.target.model.max_context_tokens
        changes.append((f"max_model_len {full:,}", {"max_model_len": full}))
    for name, update in changes:
        e = ctx.what_if(**update)
        if e is not None:
            out.append(f"the pick with {name}: {_serves(e)}")
    for name, found in _elsewhere(ctx, lambda e: e.feasible):
        out.append(f"{name}: " + (f"{found.config.engine} tp{found.config.tp} "
                                   f"{_serves(found)}" if found else "no configuration "
                                   "searched serves them either"))
    return out


def _serves(e: Evaluation) -> str:
    p = e.predicted
    if e.feasible:
        return (f"serves every request and keeps up (p95 TTFT {_ms(p.ttft_s.p95)}, "
                f"p95 TPOT {_ms(p.tpot_s.p95)})"
                + (f", {p.rejected_requests:,} unservable" if p.rejected_requests else ""))
    return f"does not: {e.rejected_reason}"


def _next_gpu(target: Target) -> GPU | None:
    """The catalog GPU of the same vendor with the next larger memory × bandwidth."""
    me = target.gpu
    def key(g: GPU) -> tuple[float, str]:
        return g.mem_bandwidth_tb_s * g.memory_gb, g.name

    bigger = [g for g in load_gpus().values() if g.vendor == me.vendor and key(g) > key(me)]
    return min(bigger, key=key) if bigger else None


def _oom_warnings(ctx: Context) -> list[RecWarning]:
    plan = plan_memory(ctx.best.config, ctx.target.gpu, ctx.target.model)
    out = [RecWarning(code=f"oom_{r.code}", text=r.reason) for r in plan.risks]
    if ctx.best.predicted.kv_headroom_fraction < 0.05:
        out.append(RecWarning(code="kv_full", text="the KV cache fills at the busiest moment "
                              "of the window: admission stalls until it drains (burst risk)"))
    if ctx.best.predicted.preemptions:
        out.append(RecWarning(code="preemptions", text=f"{ctx.best.predicted.preemptions} "
                              "recompute preemptions predicted: the KV pool is tight"))
    return out


@functools.cache
def _coverage() -> dict | None:
    """What the fit saw: models, GPUs, engines, ISL range, held-out error per engine."""
    from recommender.calibration.published.parse import parse_csv
    from recommender.model.params import FIT_FILE

    try:
        fit = json.loads(FIT_FILE.read_text(encoding="utf-8"))
        used = set(fit["provenance"]["rows_used"])
        rows = [r for r in parse_csv()[0] if r.index in used]
    except (OSError, ValueError, KeyError, TypeError, ServeFitError):
        return None
    return {"models": {get_model(r.model).name for r in rows}, "gpus": {r.gpu for r in rows},
            "engines": {r.engine for r in rows}, "isl": (min(r.isl for r in rows),
                                                         max(r.isl for r in rows)),
            "errors": fit.get("errors", {})}


def _band_warning(ctx: Context) -> list[RecWarning]:
    """Plainly, when no published measurement covers the pick's calibration cell (or the
    bands file is missing, or has no errors for the parameters' step-time provider): its figures
    then have no error band."""
    cell = ctx.best.predicted.calibration_cell
    if ctx.best.predicted.band is not None or cell is None:
        return []
    if not BANDS_FILE.exists() or load_bands().for_provider(ctx.target.params.step_time) is None:
        return [RecWarning(code="no_error_band", text=band_of_prediction(
            cell, kind=ctx.target.params.step_time)[1] or "")]
    return [RecWarning(code="uncalibrated_cell", text=(
        f"no published measurement covers {cell}: the figures are the model's alone "
        "(no error band; how far they can be trusted is unknown)"))]


def _calibration_warnings(ctx: Context) -> list[RecWarning]:
    cov = _coverage()
    if cov is None:
        return [RecWarning(code="calibration_unknown",
                           text="calibration coverage could not be read (data/calibration)")]
    out = []
    t, engine = ctx.target, ctx.best.config.engine
    if t.model.name not in cov["models"]:
        out.append(f"model {t.model.name} is not in the calibration data: predictions come "
                   "from shapes and other models' efficiencies")
    if t.gpu.name not in cov["gpus"]:
        out.append(f"GPU {t.gpu.name} is not in the calibration data")
    lo, hi = cov["isl"]
    p99 = ctx.profile.input_tokens.p99
    if p99 > hi or ctx.profile.input_tokens.p50 < lo:
        out.append(f"input lengths (p50 {ctx.profile.input_tokens.p50:,.0f}, p99 {p99:,.0f}) "
                   f"reach outside the calibrated {lo:,}-{hi:,} tokens")
    err = cov["errors"].get(f"test/{engine}", {}).get("median_ape_pct")
    if err is not None and err > HELD_OUT_ERROR_WARN_PCT:
        out.append(f"{engine}'s calibration misses held-out measurements by {err:.0f}% "
                   "(median): treat its figures as rough")
    return [RecWarning(code="outside_calibration", text=t) for t in out]


def _quality_warning(ctx: Context) -> list[RecWarning]:
    quant = ctx.best.config.weight_quantization
    out = []
    if quant in QUALITY_FORMATS:
        out.append(RecWarning(code="quality", text=f"{QUALITY_FORMATS[quant]} weights can "
                              "lower output quality: evaluate accuracy on your task first, and "
                              "serve a pre-quantized checkpoint"))
    elif quant == "fp8":
        out.append(RecWarning(code="quality", text="fp8 weights: usually within noise of bf16, "
                              "but check accuracy on your task"))
    return out


def _workload_warnings(ctx: Context) -> list[RecWarning]:
    out = []
    if ctx.synthetic:
        out.append(RecWarning(code="synthetic_workload", text="simulated a synthetic trace "
                              "with the profile's shape: pass the trace itself for its own "
                              "requests"))
    if ctx.profile.format.tokens_estimated:
        out.append(RecWarning(code="tokens_estimated", text="token counts were estimated from "
                              "text: lengths (and so latencies) are approximate"))
    if ctx.workload.too_long:
        out.append(RecWarning(code="longer_than_context", text=f"{ctx.workload.too_long:,} "
                              "requests exceed the model's context and were not simulated: "
                              "truncate them or pick a longer-context model"))
    if ctx.workload.dropped:
        out.append(RecWarning(code="rows_dropped", text=f"{ctx.workload.dropped:,} failed or "
                              "zero-token rows were not simulated"))
    return out


def _disaggregation_warning(ctx: Context) -> list[RecWarning]:
    p50 = ctx.profile.input_tokens.p50
    if p50 <= LONG_CONTEXT_TOKENS:
        return []
    return [RecWarning(code="disaggregation", text=(
        f"input_tokens.p50 {p50:,.0f} > {LONG_CONTEXT_TOKENS:,}: prefill/decode "
        "disaggregation usually pays off for long context at volume (it costs KV transfer); "
        "the simulator does not model it and export cannot package it yet, so it was not "
        "scored: benchmark it live"))]


def _feature_warnings(ctx: Context) -> list[RecWarning]:
    out = []
    spec = ctx.best.config.speculative
    if spec is not None and spec.method not in ctx.goals.measured_acceptance:
        d = ACCEPTANCE_DEFAULTS[spec.method]
        out.append(RecWarning(code="speculative_acceptance_assumed", text=(
            f"the pick's speculative decoding ({spec.method}) is predicted at the method's "
            f"published acceptance {d.acceptance:.2f} per token (band {d.low:.2f}-"
            f"{d.high:.2f}), not measured on this trace: its gain depends on the workload, "
            "benchmark it live")))
    if not ctx.result.speculative_modelled:
        out.append(RecWarning(code="speculative_not_modelled", text="speculative decoding was "
                              "not considered: the simulator does not model it yet"))
    if not ctx.workload.has_hashes:
        out.append(RecWarning(code="no_prefix_info", text="the trace has no prompt block "
                              "hashes: prefix caching's effect was not simulated (the engine "
                              "default is kept)"))
    return out
