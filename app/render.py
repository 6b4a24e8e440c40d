"""Shared text formatting: the terminal views of a Profile and a prediction, and the small
number formats the web views share (seconds in, ms/units on screen)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.figures import LATENCIES, QUANTILES, Latency
from profiler.schema import LengthStats, Profile

if TYPE_CHECKING:
    from recommender.predict_sim import LoadPrediction
    from recommender.recommendation import Candidate


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


def prediction_text(prediction: LoadPrediction) -> str:
    """A short human view of `predict` (the JSON has every field)."""
    def row(name: str, latency: Latency) -> str:
        ms = latency.ms()
        cells = "  ".join(f"{q} {_num(ms[q], '{:>9,.1f}')}" for q in ("mean", "p50", "p90", "p99"))
        return f"  {name:<5} {cells} ms"

    p = prediction
    return "\n".join([
        f"Throughput  {p.output_throughput_tok_s:,.0f} output tok/s, "
        f"{p.total_throughput_tok_s:,.0f} total tok/s, "
        f"{p.request_throughput_rps:,.2f} req/s",
        f"Latency     simulated {p.requests:,} requests ({p.mode}, "
        f"{p.replicas} replica(s))",
        *(row(name[:-2].upper(), getattr(p, name)) for name in LATENCIES),
        f"KV cache    {p.kv_capacity_tokens:,} tokens per replica, "
        f"{p.preemptions:,} preemptions",
    ])


def latency_rows(figures: dict[str, Latency]) -> dict[str, list[str]]:
    """Latency percentiles (`core.figures.Latency` by name, seconds) as a ms table for the
    screen."""
    return {"": list(figures), **{q: [fmt_ms(getattr(f, q), "{:,.1f}") for f in figures.values()]
                                  for q in QUANTILES}}


def candidate_rows(candidates: list[Candidate]) -> dict[str, list]:
    """Candidates (recommender.recommendation.Candidate) as a table, ms and units on screen."""
    def ms(seconds: float | None, digits: int) -> float | None:
        return None if seconds is None else round(seconds * 1e3, digits)

    return {
        "config": [c.label for c in candidates],
        "feasible": [c.feasible for c in candidates],
        "TTFT p95 (ms)": [ms(c.predicted.ttft_s.p95, 1) for c in candidates],
        "TPOT p95 (ms)": [ms(c.predicted.tpot_s.p95, 2) for c in candidates],
        "output tok/s": [round(c.predicted.output_throughput_tok_s) for c in candidates],
        "goodput req/s": [None if c.predicted.goodput_rps is None
                          else round(c.predicted.goodput_rps, 2) for c in candidates],
        "KV headroom": [f"{c.predicted.kv_headroom_fraction:.0%}" for c in candidates],
        "why not": [c.rejected_reason or "" for c in candidates],
    }


def candidate_points(candidates: list[Candidate], pick_label: str) -> list[dict]:
    """Chart points: output tok/s against p95 TTFT (ms), grouped by engine (a candidate
    without a p95 TTFT has no point)."""
    return [{"x": c.predicted.output_throughput_tok_s, "y": c.predicted.ttft_s.p95 * 1e3,
             "label": c.label, "group": c.config.engine, "pareto": c.pareto,
             "picked": c.label == pick_label} for c in candidates
            if c.predicted.ttft_s.p95 is not None]


def bench_argv(where: dict, load: dict, trace_path: str) -> list[str]:
    """The `python -m app bench` command line for the Validate form's values."""
    argv = ["python", "-m", "app", "bench"]
    if where["where"] == "endpoint":
        argv += ["--endpoint", where["url"]] + (["--model", where["model"]]
                                                if where.get("model") else [])
    else:
        argv += ["--launch", where["where"], "--config", "rec.json"]
    kind = load["kind"]
    argv += ["--workload", kind, "--api", load["api"]]
    if load.get("warmup_s"):
        argv += ["--warmup-s", f"{load['warmup_s']:g}"]
    if kind == "trace":
        return [*argv, "--trace", trace_path, "--duration-s", f"{load['duration_s']:g}",
                "--time-scale", f"{load['time_scale']:g}"]
    argv += ["--prompt-tokens", str(load["prompt_tokens"]),
             "--output-tokens", str(load["output_tokens"])]
    if kind == "sweep":
        return [*argv, "--concurrency", str(load["concurrency"]),
                "--num-requests", str(load["num_requests"])]
    total = 2 * load["steady_s"] + load["burst_s"]  # the CLI takes the whole run's length
    return [*argv, "--rate", f"{load['base_rate_rps']:g}",
            "--peak-rate", f"{load['peak_rate_rps']:g}", "--burst-s", f"{load['burst_s']:g}",
            "--duration-s", f"{total:g}"]


def _ms(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value * 1e3, digits)


def measured_rows(summary: object) -> dict[str, list]:
    """A run's Summary (runners.metrics) as a table: latencies in ms, throughput, errors."""
    names = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
    quantiles = ("mean", "p50", "p90", "p95", "p99")
    return {"latency (ms)": [n[:-2].upper() for n in names],
            **{q: [_ms(getattr(getattr(summary, n), q)) for n in names] for q in quantiles},
            "count": [getattr(summary, n).count for n in names]}


def comparison_rows(predicted: object, summary: object) -> dict[str, list]:
    """Predicted (recommender PredictedMetrics) and measured (runners Summary) side by side."""
    rows: list[tuple[str, float | None, float | None]] = []
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        for q in ("p50", "p95", "p99"):
            rows.append((f"{name[:-2].upper()} {q} (ms)", _ms(getattr(getattr(predicted, name), q)),
                         _ms(getattr(getattr(summary, name), q))))
    for name, label in (("output_throughput_tok_s", "output tokens/s"),
                        ("request_throughput_rps", "requests/s"), ("goodput_rps", "goodput req/s")):
        p, m = getattr(predicted, name), getattr(summary, name)
        rows.append((label, None if p is None else round(p, 2), None if m is None else round(m, 2)))
    return {"figure": [r[0] for r in rows], "predicted": [r[1] for r in rows],
            "measured": [r[2] for r in rows]}
