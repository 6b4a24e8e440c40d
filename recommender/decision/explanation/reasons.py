"""Why the pick: reasons tied to profile figures, most important first.

Owns one reason per choice the pick made (the decision's rule, the engine, max_model_len,
max_num_seqs, chunked prefill, prefix caching, the KV and weight formats, speculative decoding
and its acceptance's source, the parallel layout), each claimed effect backed by a
counterfactual simulation (`Context.what_if`). What to watch is `caveats`'s.
"""

from __future__ import annotations

from engines.config import EngineConfig
from engines.registry import ENGINES
from profiler.schema import Profile
from recommender.decision.explanation.context import Context
from recommender.decision.explanation.phrases import effect_text, p95_vs, s_text
from recommender.decision.recommendation import Decision, Reason, RecommendRequest
from recommender.model.footprint import WEIGHT_BYTES_PER_PARAM
from recommender.model.memory import plan_memory
from recommender.model.speculative import ACCEPTANCE_DEFAULTS


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
        text += (f" at {p.mean_qps or 0:.2f} req/s mean: {p95_vs('ttft', best, runner)} and "
                 f"p95 E2E {s_text(best.predicted.e2e_s.p95)} vs "
                 f"{s_text(runner.predicted.e2e_s.p95)} for the best "
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
    effect = f": {effect_text(ctx, ctx.best, alt)} with the engine default" if alt else ""
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
    effect = f"{effect_text(ctx, ctx.best, alt)} with it {'off' if chunked else 'on'}"
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
                       f"{'on' if on else 'off'} {verb} {effect_text(ctx, ctx.best, alt)} "
                       f"with it {'off' if on else 'on'}",
                  figure="prefix_reuse_infinite", value=reuse)


def _kv_reason(ctx: Context) -> Reason | None:
    if ctx.best.config.kv_cache_dtype == "auto":
        return None
    alt = ctx.what_if(kv_cache_dtype="auto")
    head = ctx.best.predicted.kv_headroom_fraction
    tail = (f"; with a bf16 KV cache {effect_text(ctx, ctx.best, alt)}, KV headroom "
            f"{alt.predicted.kv_headroom_fraction:.0%}" if alt else "; bf16 KV does not fit")
    return Reason(text=f"{ctx.best.config.kv_cache_dtype} KV cache doubles the tokens the pool "
                       f"holds: KV headroom at the busiest moment {head:.0%}{tail}",
                  figure="kv_headroom_fraction", value=head)


def _weights_reason(ctx: Context) -> Reason | None:
    quant = ctx.best.config.weight_quantization
    if quant is None or quant == "none":
        return None
    alt = ctx.what_if(weight_quantization=None)
    tail = f": {effect_text(ctx, ctx.best, alt)} with bf16 weights" if alt else \
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
    tail = f": {effect_text(ctx, ctx.best, alt)} without it" if alt else ""
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
