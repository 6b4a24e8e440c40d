"""A recommendation for the screen: the decision line, the GPU price, the candidate table with
its column help and label legend, the candidates as chart points, what binds first as load
grows, and the pick's KV pool in words."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from app.render.figures import band_short
from app.render.formats import round_ms
from profiler.schema import Profile

if TYPE_CHECKING:
    from recommender.catalog.specs import GpuPrice
    from recommender.decision.recommendation import Candidate, Decision
    from recommender.model.memory import MemoryPlan


# The tie-break rules in words (recommender.decision.decide's order), as the decision line says
# them.
RULE_WORDS = {"figure": "a clear lead", "headroom": "headroom", "fewer_gpus": "fewer GPUs",
              "calibrated": "calibration data", "simpler": "the simpler configuration",
              "order": "the search's order", "infeasible": "the search's score"}


def decision_line(decision: Decision | None) -> str:
    """'ranked by SLO boundary per GPU …; tied with 2 within the error, decided by headroom;
    73 % likely to beat vllm tp1 fp8' (empty for a recommendation stored before decisions)."""
    if decision is None:
        return ""
    if decision.rule == "infeasible":
        return decision.text
    text = f"ranked by {decision.ranked_by}; "
    if decision.tied_with:
        text += (f"tied with {len(decision.tied_with)} within the error, decided by "
                 f"{RULE_WORDS[decision.rule]}")
    else:
        text += "a clear lead beyond the error"
    if decision.confidence is not None and decision.runner_up is not None:
        text += f"; {decision.confidence:.0%} likely to beat {decision.runner_up}"
    elif decision.runner_up is not None:
        text += f"; how likely it beats {decision.runner_up} is unknown (no interval)"
    return text


def price_text(price: GpuPrice | None, usd_per_mtok: float | None) -> str:
    """'$3.49 per GPU-hour (runpod.io/pricing …, read 2026-09-25): $0.41 per million output
    tokens at today's load', or what to give when the catalog has no price."""
    if price is None:
        return ("no GPU-hour price in the catalog for this GPU: give --gpu-price-per-hour "
                "for the $/Mtok figures")
    when = f", read {price.read_on}" if price.read_on else ""
    text = f"${price.usd_per_hour:,.2f} per GPU-hour ({price.source}{when})"
    if usd_per_mtok is not None:
        text += f": ${usd_per_mtok:,.3g} per million output tokens at today's load"
    return text


def candidate_rows(candidates: list[Candidate]) -> dict[str, list]:
    """Candidates (recommender.decision.recommendation.Candidate) as a table, ms and units on
    screen."""
    return {
        "config": [c.label for c in candidates],
        "feasible": [c.feasible for c in candidates],
        "TTFT p95 (ms)": [round_ms(c.predicted.ttft_s.p95, 1) for c in candidates],
        "TPOT p95 (ms)": [round_ms(c.predicted.tpot_s.p95, 2) for c in candidates],
        "output tok/s": [round(c.predicted.output_throughput_tok_s) for c in candidates],
        "goodput req/s": [None if c.predicted.goodput_rps is None
                          else round(c.predicted.goodput_rps, 2) for c in candidates],
        "KV headroom": [f"{c.predicted.kv_headroom_fraction:.0%}" for c in candidates],
        "$/Mtok today": [None if c.usd_per_mtok is None else round(c.usd_per_mtok, 3)
                         for c in candidates],
        "band": [band_short(c.predicted.band) for c in candidates],
        "coverage (rows)": [0 if c.predicted.band is None else c.predicted.band.rows
                            for c in candidates],
        "why not": [c.rejected_reason or "" for c in candidates],
    }


# What each part of a configuration label (recommender.decision.recommend.label) means, for the
# legend under the tables: (pattern of the part, words with the part's value as {0}).
LABEL_TERMS: tuple[tuple[str, str], ...] = (
    (r"tp(\d+)$", "tp{0}: tensor parallelism over {0} GPU(s) per replica"),
    (r"tep(\d+)$", "tep{0}: tensor parallelism over {0} GPUs, experts spread by expert "
                    "parallelism over the same GPUs"),
    (r"(?:tp\d+)?dep(\d+)$", "dep{0}: attention data-parallel over {0} GPUs with the experts "
                              "spread over all of them (DeepSeek-style DEP)"),
    (r"×(\d+)$", "×{0}: {0} replicas of that layout behind a router"),
    (r"kv-(\w+)$", "kv-{0}: the KV cache stored in {0}"),
    (r"seqs(\d+)$", "seqs{0}: at most {0} sequences in a batch (max_num_seqs / "
                    "max-running-requests / max_batch_size)"),
    (r"budget(\d+)$", "budget{0}: at most {0} tokens scheduled per step "
                      "(max_num_batched_tokens / chunked-prefill size / max_num_tokens)"),
    (r"chunked-(on|off)$", "chunked-{0}: long prompts split across steps ({0})"),
    (r"prefix-(on|off)$", "prefix-{0}: prefix caching, reuse of shared prompt blocks ({0})"),
    (r"(ngram|eagle3?|draft_model|mtp)(\d+)$",
     "{0}{1}: speculative decoding, {1} draft tokens a step proposed by {0}"),
)


# Help for the candidate table's columns (shown on hover).
CANDIDATE_HELP = {
    "config": "The engine and its settings; the legend below says what each part means.",
    "feasible": "Fits in GPU memory and meets the SLOs at today's load.",
    "KV headroom": "Share of the KV cache left free at the busiest moment of the replay.",
    "band": "Median error of this calibration cell on published runs left out of the fit.",
    "coverage (rows)": "How many held-out published runs the band comes from (0: none).",
    "$/Mtok today": "US dollars per million output tokens at today's load.",
    "why not": "Why the search ranked it out, when it did.",
}


# What binds first as load grows (core.capacity.Limit), said in full on hover.
LIMIT_HELP = {
    "kv_capacity": "The KV cache fills: sequences are preempted or wait for memory.",
    "compute": "The GPU is busy every step: a queue grows though neither cap binds.",
    "max_num_seqs": "The sequence cap is reached while requests wait.",
    "prefill_interference": "TPOT breaks with no queue: prefills stretch the decode steps "
                            "of running sequences.",
    "none": "Nothing breaks within the loads tried.",
}


def label_legend(labels: list[str]) -> list[str]:
    """One line per kind of label part the given labels use, in LABEL_TERMS' order, each
    with the first value seen (engine and weight names are left as they are)."""
    lines = []
    parts = [p for text in labels for p in re.split(r"\s+|(?=×)", text) if p]
    for pattern, words in LABEL_TERMS:
        hit = next((m for p in parts if (m := re.fullmatch(pattern, p))), None)
        if hit is not None:
            lines.append(words.format(*hit.groups()))
    return lines


FRACTION_WORDS = {"config": "set in the config", "engine_release": "the release's default",
                  "engine_default": "the engine's default", "fallback": "assumed"}


def memory_text(plan: MemoryPlan, profile: Profile) -> str:
    """The pick's KV pool in words: its size, the tokens it holds and how many sequences of
    the trace's mean length (prompt + output) fit at once."""
    from recommender.model.memory import max_concurrent_sequences

    tokens = profile.input_tokens.mean + profile.output_tokens.mean
    sequences = max_concurrent_sequences(plan, tokens)
    return (f"KV cache pool {plan.kv_cache_bytes_per_gpu / 1e9:,.1f} GB per GPU (memory "
            f"fraction {plan.gpu_memory_fraction:.2f}, {FRACTION_WORDS[plan.fraction_source]}): "
            f"{plan.kv_capacity_tokens:,} tokens per replica in blocks of "
            f"{plan.block_size_tokens}, about {sequences:,} sequences at once at the trace's "
            f"mean {tokens:,.0f} tokens (prompt + output)")


def candidate_points(candidates: list[Candidate], pick_label: str) -> list[dict]:
    """Chart points on the axes the Pareto flags are computed on (recommender.decision.scoring.
    pareto_flags): x the latency objective (p95 TTFT + p95 TPOT x (mean output - 1), ms),
    y goodput per GPU (req/s). The mean output length is the one every candidate served:
    output tokens/s over requests/s. A candidate that served nothing has no point."""
    from recommender.decision.scoring import latency_s

    served = [c for c in candidates if c.predicted.request_throughput_rps > 0]
    if not served:
        return []
    p0 = served[0].predicted
    mean_out = p0.output_throughput_tok_s / p0.request_throughput_rps
    return [{"x": latency_s(c.predicted, mean_out) * 1e3,
             "y": (c.predicted.goodput_rps or 0.0) / (c.replicas * c.config.gpus_per_instance),
             "label": c.label, "group": c.config.engine, "pareto": c.pareto,
             "picked": c.label == pick_label} for c in served]
