"""Shared text formatting: the terminal views of a Profile and a prediction, and the small
number formats the web views share (seconds in, ms/units on screen)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from core.figures import (
    DEFAULT_COMPARE,
    INTERVAL_METRIC,
    LATENCIES,
    QUANTILES,
    Band,
    Latency,
    LatencyName,
    Quantile,
    ServingFigures,
    compare,
)
from profiler.schema import LengthStats, NgramAcceptance, Profile

if TYPE_CHECKING:
    from profiler.analysis.chart_data import ModelShare
    from recommender.catalog.specs import GpuPrice
    from recommender.decision.recommendation import Candidate, Decision
    from recommender.model.memory import MemoryPlan
    from recommender.sim.predict import LoadPrediction
    from runners.server.engine_metrics import SpecMeasured


_MARKDOWN_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")


def plain(text: str) -> str:
    """`text` for a Markdown-rendering element, shown as typed: every ASCII punctuation mark
    backslash-escaped (CommonMark), so a file name such as `**x** [a](javascript:…)` is no
    bold, link, image, Streamlit directive (`:red[…]`, `:material/…:`) or formula (`$…$`);
    line breaks become spaces."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


def _num(value: float | None, fmt: str = "{:,.3g}") -> str:
    return "n/a" if value is None else fmt.format(value)


def fmt_value(value: float | None, spec: str = "{:,.2f}") -> str:
    """A figure for a metric tile; "n/a" when the trace does not define it."""
    return _num(value, spec)


# The library's messages name the CLI's flags; the web views name their own fields instead.
WEB_WORDS = (
    ("--synthesize-arrivals RATE", "a rate in “Synthesize Poisson arrivals” (Start, Reading "
                                   "options)"),
    ("--synthesize-arrivals", "“Synthesize Poisson arrivals” (Start, Reading options)"),
    ("--arrival-rate RPS", "a rate in “Arrival rate for a trace without timestamps” "
                           "(Recommend, Search settings)"),
    ("pass --tokenizer DIR for exact counts", "the CLI's --tokenizer DIR counts them exactly"),
)


def web_words(text: str) -> str:
    """A library message with the CLI flags it names said as the web form's fields."""
    for flag, field in WEB_WORDS:
        text = text.replace(flag, field)
    return text


def fmt_ms(seconds: float | None, spec: str = "{:,.0f} ms") -> str:
    """Seconds shown as milliseconds."""
    return "n/a" if seconds is None else spec.format(seconds * 1e3)


def _lengths(name: str, s: LengthStats) -> str:
    return (f"  {name:<14} p50 {s.p50:>9,.0f}  p90 {s.p90:>9,.0f}  p99 {s.p99:>9,.0f}  "
            f"mean {s.mean:>9,.1f}  min {s.min:,.0f}  max {s.max:,.0f}")


def profile_text(p: Profile) -> str:
    """A short human summary of a profile (the JSON has every field)."""
    lines = [
        f"Trace     {p.format.source}",
        f"Format    {p.format.explanation}",
        f"Time      {p.format.timestamp_rule}",
        f"Requests  {p.n_requests:,} over {_num(p.duration_s, '{:,.1f}')} s",
        f"Rate      mean {_num(p.mean_qps)} req/s, peak 1 s {_num(p.peak_qps_1s)} "
        f"(x{_num(p.peak_to_mean_1s)}), peak 60 s {_num(p.peak_qps_60s)} "
        f"(x{_num(p.peak_to_mean_60s)}), inter-arrival CV {_num(p.interarrival_cv)}",
        _lengths("input tokens", p.input_tokens),
        _lengths("output tokens", p.output_tokens),
        f"Sessions  multi-turn share {_num(p.multi_turn_share, '{:.1%}')}",
        f"Prefix    reuse (infinite cache) {_num(p.prefix_reuse_infinite, '{:.1%}')}"
        + "".join(f", LRU {k} blocks {v:.1%}" for k, v in (p.prefix_reuse_lru or {}).items()),
        "Segments  " + "; ".join(
            f"{s.share:.0%} around {s.input_tokens_p50:,.0f} in / {s.output_tokens_p50:,.0f} out"
            for s in p.segments),
    ]
    if p.format.ngram_acceptance is not None:
        lines.append(f"Speculate ngram acceptance {p.format.ngram_acceptance.acceptance:.2f} "
                     f"per token: {ngram_detail(p.format.ngram_acceptance)}")
    lines += [f"Warning   {w}" for w in p.warnings]
    return "\n".join(lines)


def ngram_detail(n: NgramAcceptance) -> str:
    """How the trace's prompt-lookup acceptance was measured, in one sentence."""
    return (f"prompt lookup (n = {n.ngram_min}-{n.ngram_max}, k = {n.k}) replayed over the "
            f"trace's {n.outputs:,} replies: {n.tokens_per_step:.2f} tokens per step; the rate "
            "the simulator takes for ngram speculation.")


def prediction_text(prediction: LoadPrediction) -> str:
    """A short human view of `predict` (the JSON has every field)."""
    def row(name: str, latency: Latency) -> str:
        ms = latency.ms()
        cells = "  ".join(f"{q} {_num(ms[q], '{:>9,.1f}')}" for q in ("mean", "p50", "p90", "p99"))
        return f"  {name:<5} {cells} ms"

    p = prediction
    out_range = p.interval_range("output_throughput_tok_s")
    spread = f" ({out_range[0]:,.0f}-{out_range[1]:,.0f})" if out_range else ""
    return "\n".join([
        f"Throughput  {p.output_throughput_tok_s:,.0f}{spread} output tok/s, "
        f"{p.total_throughput_tok_s:,.0f} total tok/s, "
        f"{p.request_throughput_rps:,.2f} req/s",
        f"Latency     simulated {p.requests:,} requests ({p.mode}, "
        f"{p.replicas} replica(s))",
        *(row(name[:-2].upper(), getattr(p, name)) for name in LATENCIES),
        f"KV cache    {p.kv_capacity_tokens:,} tokens per replica, "
        f"{p.preemptions:,} preemptions",
        f"max_model_len {p.max_model_len}",
        *([f"Band        {band_text(p.band)}"]
          if p.band is not None else []),
        *(f"Interval    {name}: x{i.low:.2f}-{i.high:.2f} of the prediction (p10-p90 of "
          f"{i.rows} held-out rows in {i.basis}{', pooled' if i.pooled else ''})"
          for name, i in p.intervals.items()),
        *(f"warning: {w}" for w in p.warnings),
    ])


def latency_rows(figures: dict[str, Latency]) -> dict[str, list[str]]:
    """Latency percentiles (`core.figures.Latency` by name, seconds) as a ms table for the
    screen."""
    return {"latency (ms)": list(figures),
            **{q: [fmt_ms(getattr(f, q), "{:,.1f}") for f in figures.values()]
               for q in QUANTILES}}


def interval_text(figures: ServingFigures) -> str:
    """The p95 TTFT / TPOT and output throughput as 'value (low-high)', and the interval's
    basis."""
    parts = []
    for label, name, q, unit, scale, fmt in (
            ("p95 TTFT", "ttft_s", "p95", "ms", 1e3, "{:,.0f}"),
            ("p95 TPOT", "tpot_s", "p95", "ms", 1e3, "{:,.1f}"),
            ("output", "output_throughput_tok_s", "mean", "tok/s", 1.0, "{:,.0f}")):
        found = figures.interval_range(name, q)
        value = getattr(figures, name)
        value = getattr(value, q) if isinstance(value, Latency) else value
        if found is None or value is None:
            continue
        parts.append(f"{label} {fmt.format(value * scale)} ({fmt.format(found[0] * scale)}-"
                     f"{fmt.format(found[1] * scale)}) {unit}")
    basis = sorted({f"{i.basis} ({i.rows} rows{', pooled' if i.pooled else ''})"
                    for i in figures.intervals.values()})
    return "  ".join(parts) + ("; from " + ", ".join(basis) if basis else "")


def band_text(band: Band | None, cell: str | None = None) -> str:
    """A prediction's error band for the screen: '±22 % (cell …, 8 held-out rows)', or
    'no calibrated cell' (naming the cell when known) outside every calibrated cell."""
    if band is None:
        return "no calibrated cell" + (f" ({cell}: no published measurement covers it)"
                                       if cell else "")
    return f"±{band.median_ape * 100:.0f} % (cell {band.cell}, {band.rows} held-out rows)"


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


# A calibration cell's parts in words (recommender.calibration.cells.cell_of: engine/gpu
# family/dense|moe/regime), for the views that show a cell name.
REGIME_WORDS = {"offline": "offline (all requests at once, max throughput)",
                "low_batch": "closed loop at 4 or fewer concurrent users",
                "fixed_concurrency": "closed loop above 4 concurrent users",
                "rate": "open loop at a request rate"}
KIND_WORDS = {"dense": "dense model", "moe": "mixture-of-experts model"}


def cell_words(cell: str | None) -> str:
    """'vllm/hopper/dense/fixed_concurrency' as 'vllm on hopper GPUs, dense model, closed
    loop above 4 concurrent users'; empty for None or a name of another shape."""
    parts = (cell or "").split("/")
    if len(parts) != 4:
        return ""
    engine, family, kind, regime = parts
    return (f"{engine} on {family} GPUs, {KIND_WORDS.get(kind, kind)}, "
            f"{REGIME_WORDS.get(regime, regime)}")


def band_short(band: Band | None) -> str:
    """A band for a table cell: '±22 %', or 'no calibrated cell'."""
    return "no calibrated cell" if band is None else f"±{band.median_ape * 100:.0f} %"


def candidate_rows(candidates: list[Candidate]) -> dict[str, list]:
    """Candidates (recommender.decision.recommendation.Candidate) as a table, ms and units on
    screen."""
    return {
        "config": [c.label for c in candidates],
        "feasible": [c.feasible for c in candidates],
        "TTFT p95 (ms)": [_ms(c.predicted.ttft_s.p95, 1) for c in candidates],
        "TPOT p95 (ms)": [_ms(c.predicted.tpot_s.p95, 2) for c in candidates],
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


def _compact(n: int) -> str:
    """A count compact for a tile label (1500 -> 1,500, 16000 -> 16k, 5120000 -> 5.12M)."""
    if n >= 1_000_000:
        return f"{n / 1e6:.3g}M"
    return f"{n / 1e3:.3g}k" if n >= 10_000 or (n >= 1000 and n % 1000 == 0) else f"{n:,}"


def lru_tile(blocks: int, ratio: float, block_size: int | None) -> tuple[str, str, str]:
    """An LRU reuse tile: its size in tokens when the block size is known (16 for text the
    profiler hashed, 512 for Mooncake's hash ids), else in blocks."""
    if block_size:
        return (f"LRU {_compact(blocks * block_size)} tok", f"{ratio:.1%}",
                f"Prefix-cache hit ratio of an LRU cache holding {blocks:,} blocks of "
                f"{block_size:,} tokens ({blocks * block_size:,} tokens).")
    return (f"LRU {_compact(blocks)} blocks", f"{ratio:.1%}",
            f"Prefix-cache hit ratio of an LRU cache holding {blocks:,} blocks (the trace "
            "does not say how many tokens a block holds).")


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


def curve_bands(figures: ServingFigures) -> dict[str, tuple[float, float]]:
    """The p10-p90 interval ratios of p95 TTFT and TPOT (load curve figure -> (low, high)),
    for the figures that have one; the curve carries today's interval to every load."""
    out = {}
    for curve_name, group in (("ttft_p95_s", INTERVAL_METRIC["ttft_s"]),
                              ("tpot_p95_s", INTERVAL_METRIC["tpot_s"])):
        found = figures.intervals.get(group)
        if found is not None:
            out[curve_name] = (found.low, found.high)
    return out


def model_rows(models: list[ModelShare]) -> dict[str, list]:
    """The per-model split (profiler.analysis.chart_data.ModelShare) as a table for the screen."""
    def tokens(v: float | None) -> str:
        return "" if v is None else f"{v:,.0f}"

    return {"model": [m.model for m in models],
            "requests": [f"{m.requests:,}" for m in models],
            "share": [f"{m.share:.1%}" for m in models],
            "input p50 (tokens)": [tokens(m.input_tokens_p50) for m in models],
            "output p50 (tokens)": [tokens(m.output_tokens_p50) for m in models],
            "output tokens, all": [f"{m.output_tokens_total:,}" for m in models]}


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


def _ms(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value * 1e3, digits)


def measured_rows(summary: ServingFigures) -> dict[str, list[object]]:
    """A run's latencies (a measured `ServingFigures`, e.g. runners' Summary) as a ms table."""
    rows = [getattr(summary, n) for n in LATENCIES]
    return {"latency (ms)": [n[:-2].upper() for n in LATENCIES],
            **{q: [_ms(getattr(lat, q)) for lat in rows] for q in QUANTILES},
            "count": [lat.count for lat in rows]}


# What the Validate view compares: ITL is left out (the simulator's ITL is its TPOT).
_COMPARED: tuple[tuple[LatencyName, tuple[Quantile, ...]], ...] = tuple(
    (name, qs) for name, qs in DEFAULT_COMPARE if name != "itl_s")
_RATE_LABELS = {"output_throughput_tok_s": "output tokens/s",
                "total_throughput_tok_s": "total tokens/s", "request_throughput_rps": "requests/s",
                "goodput_rps": "goodput req/s"}


def comparison_rows(predicted: ServingFigures, measured: ServingFigures) -> dict[str, list[object]]:
    """Predicted against measured (`core.figures.compare`), ms and units on screen, with the
    relative error of the prediction in %."""
    deltas = compare(predicted, measured, _COMPARED)
    # list[object]: the columns mix labels and numbers, and list is invariant in its item type
    labels: list[object] = []
    pred: list[object] = []
    meas: list[object] = []
    for d in deltas:
        if d.figure in _RATE_LABELS:
            labels.append(_RATE_LABELS[d.figure])
            pred.append(None if d.predicted is None else round(d.predicted, 2))
            meas.append(None if d.measured is None else round(d.measured, 2))
        else:
            name, q = d.figure.split(".")
            labels.append(f"{name[:-2].upper()} {q} (ms)")
            pred.append(_ms(d.predicted))
            meas.append(_ms(d.measured))
    return {"figure": labels, "predicted": pred, "measured": meas,
            "error (%)": [None if d.error is None else round(d.error * 100, 1) for d in deltas]}


def speculation_text(spec: SpecMeasured) -> str:
    """Speculative decoding as the engine counted it over a run, and the `recommend` flag that
    simulates at that rate."""
    text = f"{spec.tokens_per_step:.2f} tokens/step ({spec.source})"
    if spec.acceptance is not None:
        text += (f", k = {spec.draft_tokens}: acceptance {spec.acceptance:.2f} per token "
                 f"(recommend --spec-acceptance METHOD={spec.acceptance:.2f})")
    return text
