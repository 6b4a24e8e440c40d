"""A workload Profile for the screen: the terminal summary, the sentence saying how the n-gram
acceptance was measured, the LRU reuse tiles and the per-model table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.render.formats import fmt_num
from profiler.schema import LengthStats, NgramAcceptance, Profile

if TYPE_CHECKING:
    from profiler.analysis.chart_data.model_split import ModelShare


def _lengths(name: str, s: LengthStats) -> str:
    return (f"  {name:<14} p50 {s.p50:>9,.0f}  p90 {s.p90:>9,.0f}  p99 {s.p99:>9,.0f}  "
            f"mean {s.mean:>9,.1f}  min {s.min:,.0f}  max {s.max:,.0f}")


def profile_text(p: Profile) -> str:
    """A short human summary of a profile (the JSON has every field)."""
    lines = [
        f"Trace     {p.format.source}",
        f"Format    {p.format.explanation}",
        f"Time      {p.format.timestamp_rule}",
        f"Requests  {p.n_requests:,} over {fmt_num(p.duration_s, '{:,.1f}')} s",
        f"Rate      mean {fmt_num(p.mean_qps)} req/s, peak 1 s {fmt_num(p.peak_qps_1s)} "
        f"(x{fmt_num(p.peak_to_mean_1s)}), peak 60 s {fmt_num(p.peak_qps_60s)} "
        f"(x{fmt_num(p.peak_to_mean_60s)}), inter-arrival CV {fmt_num(p.interarrival_cv)}",
        _lengths("input tokens", p.input_tokens),
        _lengths("output tokens", p.output_tokens),
        f"Sessions  multi-turn share {fmt_num(p.multi_turn_share, '{:.1%}')}",
        f"Prefix    reuse (infinite cache) {fmt_num(p.prefix_reuse_infinite, '{:.1%}')}"
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


def model_rows(models: list[ModelShare]) -> dict[str, list]:
    """The per-model split (profiler.analysis.chart_data.model_split) as a table for the screen."""
    def tokens(v: float | None) -> str:
        return "" if v is None else f"{v:,.0f}"

    return {"model": [m.model for m in models],
            "requests": [f"{m.requests:,}" for m in models],
            "share": [f"{m.share:.1%}" for m in models],
            "input p50 (tokens)": [tokens(m.input_tokens_p50) for m in models],
            "output p50 (tokens)": [tokens(m.output_tokens_p50) for m in models],
            "output tokens, all": [f"{m.output_tokens_total:,}" for m in models]}
