"""Serving figures (core.figures) for the screen, predicted and measured alike: the terminal
view of a prediction, latency tables in ms, p10-p90 intervals, calibration bands and cells in
words, predicted against measured, and a run's speculative decoding. A recommendation's
candidates and decision are app.render.recommendation's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.render.formats import fmt_ms, fmt_num, round_ms
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

if TYPE_CHECKING:
    from recommender.sim.predict import LoadPrediction
    from runners.server.engine_metrics import SpecMeasured


def prediction_text(prediction: LoadPrediction) -> str:
    """A short human view of `predict` (the JSON has every field)."""
    def row(name: str, latency: Latency) -> str:
        ms = latency.ms()
        cells = "  ".join(f"{q} {fmt_num(ms[q], '{:>9,.1f}')}"
                          for q in ("mean", "p50", "p90", "p99"))
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


def band_short(band: Band | None) -> str:
    """A band for a table cell: '±22 %', or 'no calibrated cell'."""
    return "no calibrated cell" if band is None else f"±{band.median_ape * 100:.0f} %"


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


def measured_rows(summary: ServingFigures) -> dict[str, list[object]]:
    """A run's latencies (a measured `ServingFigures`, e.g. runners' Summary) as a ms table."""
    rows = [getattr(summary, n) for n in LATENCIES]
    return {"latency (ms)": [n[:-2].upper() for n in LATENCIES],
            **{q: [round_ms(getattr(lat, q)) for lat in rows] for q in QUANTILES},
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
            pred.append(round_ms(d.predicted))
            meas.append(round_ms(d.measured))
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
