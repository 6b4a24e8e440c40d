"""Shared text formatting: the terminal views of a Profile and a prediction, and the small
number formats the web views share (seconds in, ms/units on screen)."""

from __future__ import annotations

from profiler.schema import LengthStats, Profile


def _num(value: float | None, fmt: str = "{:,.3g}") -> str:
    return "n/a" if value is None else fmt.format(value)


def fmt_value(value: float | None, spec: str = "{:,.2f}") -> str:
    """A figure for a metric tile; "n/a" when the trace does not define it."""
    return _num(value, spec)


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
    lines += [f"Warning   {w}" for w in p.warnings]
    return "\n".join(lines)


def prediction_text(summary: dict) -> str:
    """A short human view of `predict` (the JSON has every field)."""
    def row(key: str) -> str:
        v = summary[key]
        cells = "  ".join(f"{q} {_num(v[q], '{:>9,.1f}')}" for q in ("mean", "p50", "p90", "p99"))
        return f"  {key[:-3].upper():<5} {cells} ms"

    return "\n".join([
        f"Throughput  {summary['output_throughput_tok_s']:,.0f} output tok/s, "
        f"{summary['total_throughput_tok_s']:,.0f} total tok/s, "
        f"{summary['request_throughput_rps']:,.2f} req/s",
        f"Latency     simulated {summary['requests']:,} requests ({summary['mode']}, "
        f"{summary['replicas']} replica(s))",
        *(row(k) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")),
        f"KV cache    {summary['kv_capacity_tokens']:,} tokens per replica, "
        f"{summary['preemptions']:,} preemptions",
    ])


def latency_rows(figures: dict[str, object]) -> dict[str, list[str]]:
    """Latency percentiles (LatencyFigures by name, seconds) as a ms table for the screen."""
    quantiles = ("mean", "p50", "p90", "p95", "p99")
    return {"": list(figures), **{q: [fmt_ms(getattr(f, q), "{:,.1f}") for f in figures.values()]
                                  for q in quantiles}}


def candidate_rows(candidates: list) -> dict[str, list]:
    """Candidates (recommender.recommendation.Candidate) as a table, ms and units on screen."""
    return {
        "config": [c.label for c in candidates],
        "feasible": [c.feasible for c in candidates],
        "TTFT p95 (ms)": [round(c.predicted.ttft_s.p95 * 1e3, 1) for c in candidates],
        "TPOT p95 (ms)": [round(c.predicted.tpot_s.p95 * 1e3, 2) for c in candidates],
        "output tok/s": [round(c.predicted.output_throughput_tok_s) for c in candidates],
        "goodput req/s": [None if c.predicted.goodput_rps is None
                          else round(c.predicted.goodput_rps, 2) for c in candidates],
        "KV headroom": [f"{c.predicted.kv_headroom_fraction:.0%}" for c in candidates],
        "why not": [c.rejected_reason or "" for c in candidates],
    }


def candidate_points(candidates: list, pick_label: str) -> list[dict]:
    """Chart points: output tok/s against p95 TTFT (ms), grouped by engine."""
    return [{"x": c.predicted.output_throughput_tok_s, "y": c.predicted.ttft_s.p95 * 1e3,
             "label": c.label, "group": c.config.engine, "pareto": c.pareto,
             "picked": c.label == pick_label} for c in candidates]
