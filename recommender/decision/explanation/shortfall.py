"""When the pick falls short: a window it cannot serve (requests it can never serve, or a load
it falls behind) and SLOs this hardware cannot meet, each with what would, simulated on the
same window: the pick with chunked prefill on or the model's full context, and quick searches
on twice the GPUs and on the next bigger GPU of the catalog.
"""

from __future__ import annotations

from collections.abc import Callable

from recommender.catalog.lookup import load_gpus
from recommender.catalog.specs import GPU
from recommender.decision.explanation.context import Context
from recommender.decision.explanation.phrases import ms_text
from recommender.decision.goals import Target
from recommender.decision.recommendation import UNSERVABLE, RecWarning
from recommender.decision.scoring import Evaluation
from recommender.decision.search import search
from recommender.model.defaults import scheduler_caps
from recommender.model.memory import plan_memory
from recommender.sim.refusals import unservable_counts
from recommender.sim.trace_window import head_window


def slo_warning(ctx: Context) -> list[RecWarning]:
    if not ctx.goals.has_slo or ctx.best.predicted.slo_met:
        return []
    best = ctx.best.predicted
    text = (f"SLO unattainable on {ctx.target.gpus}× {ctx.target.gpu.name}: best p95 TTFT "
            f"{ms_text(best.ttft_s.p95)}, p95 TPOT {ms_text(best.tpot_s.p95)}. ")
    text += "; ".join(_what_would_attain(ctx))
    return [RecWarning(code="slo_unattainable", text=text)]


def _what_would_attain(ctx: Context) -> list[str]:
    """Quick searches on 2× the GPUs and on the next bigger GPU of the catalog."""
    out = []
    for name, found in _elsewhere(ctx, lambda e: e.predicted.slo_met):
        if found is not None:
            p = found.predicted
            out.append(f"{name} would attain it ({found.config.engine}, p95 TTFT "
                       f"{ms_text(p.ttft_s.p95)}, p95 TPOT {ms_text(p.tpot_s.p95)})")
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


def unservable_warning(ctx: Context) -> list[RecWarning]:
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
        return (f"serves every request and keeps up (p95 TTFT {ms_text(p.ttft_s.p95)}, "
                f"p95 TPOT {ms_text(p.tpot_s.p95)})"
                + (f", {p.rejected_requests:,} unservable" if p.rejected_requests else ""))
    return f"does not: {e.rejected_reason}"


def _next_gpu(target: Target) -> GPU | None:
    """The catalog GPU of the same vendor with the next larger memory × bandwidth."""
    me = target.gpu
    def key(g: GPU) -> tuple[float, str]:
        return g.mem_bandwidth_tb_s * g.memory_gb, g.name

    bigger = [g for g in load_gpus().values() if g.vendor == me.vendor and key(g) > key(me)]
    return min(bigger, key=key) if bigger else None
