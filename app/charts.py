"""Plotly figures drawn from the typed chart records (no figures computed here, only drawn)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.capacity import DayPlan, LoadCurve
from core.figures import Latency
from profiler.analysis.chart_data.arrivals import ArrivalSeries
from profiler.analysis.chart_data.distributions import Heatmap, LogHistogram
from profiler.analysis.chart_data.reuse import ReuseCurve
from profiler.analysis.chart_data.segment_outlines import SegmentOutline

if TYPE_CHECKING:
    from recommender.model.memory import MemoryPlan

HEIGHT = 360
MARGIN = {"t": 80, "b": 40, "l": 50, "r": 20}
LEGEND = {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0}


def _layout(fig: go.Figure, title: str, **axes: object) -> go.Figure:
    fig.update_layout(title=title, height=HEIGHT, margin=MARGIN, legend=LEGEND, **axes)
    return fig


def arrivals(series: ArrivalSeries) -> go.Figure:
    """Requests per second over time; the peak line appears when points cover many windows."""
    fig = go.Figure(go.Scattergl(x=series.t_s, y=series.mean_rps, mode="lines",
                                 name=f"mean per {series.bucket_s:g} s", line={"width": 1}))
    if series.bucket_s > series.window_s:
        fig.add_trace(go.Scattergl(x=series.t_s, y=series.peak_rps, mode="lines",
                                   name=f"busiest {series.window_s:g} s", line={"width": 1}))
    return _layout(fig, f"Arrivals per {series.window_s:g} s",
                   xaxis_title="time since first request (s)", yaxis_title="requests/s")


def log_histogram(hist: LogHistogram, title: str, unit: str) -> go.Figure:
    """Counts per log bin (bars) and the CDF (line, right axis)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    # A filled step line: bars would need widths, which a log axis draws unevenly.
    fig.add_trace(go.Scatter(x=[*hist.lower, *hist.upper[-1:]],
                             y=[*hist.counts, *hist.counts[-1:]], mode="lines", fill="tozeroy",
                             line={"shape": "hv"}, name="requests"), secondary_y=False)
    fig.add_trace(go.Scatter(x=hist.upper, y=hist.cdf, mode="lines", name="CDF",
                             line={"shape": "hv"}), secondary_y=True)
    fig.update_xaxes(type="log", title_text=unit)
    fig.update_yaxes(title_text="count", secondary_y=False)
    # Fixed quartile ticks: left to itself Plotly aligns them with the counts' grid
    # (0.307, 0.615, 0.922).
    fig.update_yaxes(title_text="CDF", range=[0, 1], tickmode="array",
                     tickvals=[0, 0.25, 0.5, 0.75, 1], tickformat=".0%", showgrid=False,
                     secondary_y=True)
    subtitle = f" ({hist.zeros:,} at zero, not on the log axis)" if hist.zeros else ""
    return _layout(fig, title + subtitle)


def length_heatmap(heat: Heatmap, outlines: Sequence[SegmentOutline]) -> go.Figure:
    """Input x output request counts on log axes, with each segment's 2-sigma outline."""
    fig = go.Figure(go.Heatmap(x=heat.x_lower, y=heat.y_lower, z=heat.counts,
                               colorscale="Blues", name="requests",
                               hovertemplate="in ≥ %{x:.3g}, out ≥ %{y:.3g}: %{z}<extra></extra>"))
    for i, seg in enumerate(outlines):
        fig.add_trace(go.Scatter(
            x=seg.input_tokens, y=seg.output_tokens, mode="lines",
            name=f"segment {i + 1} ({seg.share:.0%})", line={"width": 2}))
    fig.update_xaxes(type="log", title_text="input tokens")
    fig.update_yaxes(type="log", title_text="output tokens")
    return _layout(fig, "Input x output tokens, with the length segments")


def reuse_curve(curve: ReuseCurve) -> go.Figure:
    """Prefix-cache hit ratio against LRU size, with the infinite-cache bound."""
    fig = go.Figure(go.Scatter(x=curve.capacity_blocks, y=curve.hit_ratio, mode="lines+markers",
                               name="LRU"))
    fig.add_hline(y=curve.infinite_hit_ratio, line_dash="dot",
                  annotation_text=f"unbounded cache {curve.infinite_hit_ratio:.1%}")
    unit = f"cache size (blocks of {curve.block_size} tokens)" if curve.block_size else \
        "cache size (blocks)"
    fig.update_xaxes(type="log", title_text=unit)
    fig.update_yaxes(title_text="hit ratio", tickformat=".0%", rangemode="tozero")
    return _layout(fig, "Prefix reuse against LRU cache size")


def latency_throughput(points: Sequence[dict], x_title: str, y_title: str) -> go.Figure:
    """Candidates as points (`x`, `y`, `label`, `group`, `pareto`, `picked`); front joined."""
    fig = go.Figure()
    for group in dict.fromkeys(p["group"] for p in points):
        mine = [p for p in points if p["group"] == group]
        fig.add_trace(go.Scatter(
            x=[p["x"] for p in mine], y=[p["y"] for p in mine], mode="markers", name=group,
            text=[p["label"] for p in mine], hovertemplate="%{text}<br>%{x:.3g}, %{y:.3g}",
            marker={"size": 8, "opacity": 0.7}))
    # Drawn on the axes it is computed on, so the flagged points lie on the line.
    front = sorted((p for p in points if p["pareto"]), key=lambda p: p["x"])
    if front:
        fig.add_trace(go.Scatter(x=[p["x"] for p in front], y=[p["y"] for p in front],
                                 mode="lines", name="Pareto front", line={"dash": "dash",
                                                                          "shape": "hv"}))
    for p in points:
        if p["picked"]:
            fig.add_trace(go.Scatter(x=[p["x"]], y=[p["y"]], mode="markers", name="pick",
                                     marker={"symbol": "star", "size": 18, "color": "gold",
                                             "line": {"width": 1, "color": "black"}}))
    # Log latency: a trace that overloads some candidates spans ms to hours (Mooncake: 4 M ms).
    fig.update_xaxes(type="log")
    fig.update_yaxes(rangemode="tozero")
    return _layout(fig, "Candidates: goodput per GPU against latency (the Pareto front's "
                   "axes)", xaxis_title=x_title, yaxis_title=y_title)


def live_run(samples: Sequence) -> go.Figure:
    """A running benchmark (runners.benchmark.live_run.ProgressSample list): throughput, TTFT,
    queue."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("completed req/s", "TTFT p50 (s)", "queue depth"))
    t = [s.elapsed_s for s in samples]
    fig.add_trace(go.Scatter(x=t, y=[s.throughput_rps for s in samples], name="req/s"), 1, 1)
    fig.add_trace(go.Scatter(x=t, y=[s.ttft_p50_s for s in samples], name="TTFT p50"), 2, 1)
    fig.add_trace(go.Scatter(x=t, y=[s.queue_depth for s in samples], name="queue"), 3, 1)
    fig.update_xaxes(title_text="seconds since the start", row=3, col=1)
    fig.update_layout(height=3 * 180, margin=MARGIN, showlegend=False)
    return fig


def _ms(curve: LoadCurve, name: str) -> list[float | None]:
    return [None if getattr(p, name) is None else getattr(p, name) * 1e3 for p in curve.points]


def load_curve(curve: LoadCurve, bands: dict[str, tuple[float, float]] | None = None,
               others: Sequence[LoadCurve] = ()) -> go.Figure:
    """Predicted p95 TTFT and TPOT (ms, log axes) of the pick against load, with the SLO lines
    and the trace's mean, its peak and the pick's boundary marked; `bands` (figure -> (low,
    high) as ratios to the value, the figure's p10-p90 interval) shade the pick's curves;
    `others` (each other engine's best) are drawn dashed beside it."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("p95 TTFT (ms)", "p95 TPOT (ms)"))
    x = [p.rate_rps for p in curve.points]
    for col, (name, slo) in enumerate((("ttft_p95_s", curve.slo_ttft_s),
                                        ("tpot_p95_s", curve.slo_tpot_s)), start=1):
        y = _ms(curve, name)
        if bands and name in bands:
            _band(fig, x, y, bands[name], col)
        for other in others:
            fig.add_trace(go.Scatter(
                x=[p.rate_rps for p in other.points], y=_ms(other, name), mode="lines",
                line={"dash": "dash"}, name=other.label, legendgroup=other.label,
                showlegend=col == 1), 1, col)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers",
                                 name=f"the pick: {curve.label}" if curve.label else "the pick",
                                 legendgroup="pick", showlegend=col == 1 and bool(others),
                                 line={"color": "black"},
                                 marker={"color": ["green" if p.holds else "red"
                                                   for p in curve.points]}), 1, col)
        if slo is not None:
            fig.add_hline(y=slo * 1e3, line_dash="dash", row=1, col=col)
            # the label by hand: add_hline's annotation takes y as log10 on a log axis
            # (an SLO of 50 ms was labelled at 10^50 and stretched the axis there)
            fig.add_annotation(text="SLO", x=1, xref="x domain", xanchor="right",
                               y=math.log10(slo * 1e3), yanchor="bottom", showarrow=False,
                               row=1, col=col)
        # mean and peak are often close: their labels sit at different heights
        marks = [("mean", curve.mean_rps, "dot", "bottom right"),
                 ("peak", curve.peak_rps, "dot", "top right"),
                 ("boundary", curve.boundary_rps, "solid", "top left")]
        for label, rps, dash, where in marks:
            if rps:
                fig.add_vline(x=rps, line_dash=dash, annotation_text=label,
                              annotation_position=where, row=1, col=col)
    fig.update_xaxes(title_text="offered load (req/s)")
    fig.update_yaxes(type="log")
    fig.update_layout(showlegend=bool(others), legend={"orientation": "h", "y": -0.25})
    title = "Predicted p95 latency against load (green: SLOs hold)"
    return _layout(fig, title + ("; dashed: each other engine's best" if others else ""))


def latency_quantiles(figures: Sequence[tuple[str, Latency, tuple[float, float] | None]]
                      ) -> go.Figure:
    """Predicted latency distributions, one panel per (name, Latency, interval ratios or
    None): p50 to p99 in ms, each with its p10-p90 interval as an error bar."""
    names = ("p50", "p90", "p95", "p99")
    fig = make_subplots(rows=1, cols=len(figures),
                        subplot_titles=[f"{name} (ms)" for name, _, _ in figures])
    for col, (name, latency, ratios) in enumerate(figures, start=1):
        y = [getattr(latency, q) for q in names]
        shown = [(q, v * 1e3) for q, v in zip(names, y, strict=True) if v is not None]
        error = None
        if ratios is not None:
            low, high = ratios
            error = {"type": "data", "symmetric": False,
                     "array": [v * (high - 1) for _, v in shown],
                     "arrayminus": [v * (1 - low) for _, v in shown]}
        fig.add_trace(go.Scatter(x=[q for q, _ in shown], y=[v for _, v in shown],
                                 mode="markers+lines", name=name, error_y=error), 1, col)
    fig.update_layout(showlegend=False)
    return _layout(fig, "Predicted latency distribution of the pick (bars: p10-p90 interval)")


def _band(fig: go.Figure, x: list[float], y: list[float | None],
          ratios: tuple[float, float], col: int) -> None:
    """The p10-p90 interval around a curve, shaded (lower edge first, filled to the upper)."""
    low, high = ratios
    for edge, fill in ((low, None), (high, "tonexty")):
        fig.add_trace(go.Scatter(x=x, y=[None if v is None else v * edge for v in y],
                                 mode="lines", line={"width": 0}, fill=fill,
                                 fillcolor="rgba(99,110,250,0.18)", hoverinfo="skip",
                                 name="p10-p90 interval"), 1, col)


def day_plan(day: DayPlan) -> go.Figure:
    """Replicas of the pick per window of the trace (bars) over the window's arrival rate
    (a line on the second axis), with the fleet sized for the busiest window marked."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    t_h = [w.t_s / 3600 for w in day.windows]
    fig.add_trace(go.Bar(x=t_h, y=[w.gpus for w in day.windows], name="GPUs needed"),
                  secondary_y=False)
    fig.add_trace(go.Scatter(x=t_h, y=[w.rate_rps for w in day.windows], name="req/s",
                             mode="lines+markers"), secondary_y=True)
    fig.add_hline(y=day.peak_fleet_gpus, line_dash="dash",
                  annotation_text="fleet sized for the peak")
    fig.update_xaxes(title_text="hours from the trace's start (window start)")
    fig.update_yaxes(title_text="GPUs", secondary_y=False)
    fig.update_yaxes(title_text="arrivals (req/s)", secondary_y=True)
    return _layout(fig, "GPUs the pick needs over the trace's span")


# The memory split's parts in stacking order: (MemoryPlan field, name on the chart).
MEMORY_PARTS = (("weights_bytes_per_gpu", "weights"),
                ("activation_reserve_bytes_per_gpu", "activations (peak step)"),
                ("fixed_reserve_bytes_per_gpu", "CUDA context, graphs, NCCL"),
                ("kv_cache_bytes_per_gpu", "KV cache pool"),
                ("headroom_bytes_per_gpu", "left unclaimed"))


def memory_split(plan: MemoryPlan) -> go.Figure:
    """One GPU's memory (recommender.model.memory.MemoryPlan) as a stacked bar, GB."""
    fig = go.Figure()
    for field, name in MEMORY_PARTS:
        gb = max(getattr(plan, field), 0.0) / 1e9
        fig.add_trace(go.Bar(x=[gb], y=["one GPU"], orientation="h", name=name,
                             hovertemplate=f"{name}: %{{x:,.1f}} GB<extra></extra>",
                             text=[f"{gb:,.1f}"], textposition="inside"))
    fig.update_xaxes(title_text=f"GB of {plan.gpu_memory_bytes / 1e9:,.0f} GB",
                     range=[0, plan.gpu_memory_bytes / 1e9])
    _layout(fig, "GPU memory of the pick, per GPU")
    fig.update_layout(barmode="stack", height=240)
    return fig
