"""The bundle's REPORT.md: what is served and how to launch it, the capability check, the
predicted figures with their error band, how far the config holds (SLO boundary, growth table,
the load curve as a table and a Mermaid chart), the reasons and warnings, and the files.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath

from core.capacity import Capacity
from core.capacity_text import LIMIT_TEXT, boundary_text, day_text, growth_table
from core.figures import LATENCIES, Band, ServingFigures
from engines.base import EnginePlugin
from engines.config import EngineConfig
from engines.export.manifests import KUBERNETES_FILE
from engines.export.request import ExportRequest
from engines.export.shell import BENCH_SCRIPT, DOCKER_SCRIPT, LAUNCH_SCRIPT
from engines.layout import parallel_layout

REPORT_FILE = "REPORT.md"
# The throughputs REPORT.md lists, with their intervals (goodput follows, without one).
THROUGHPUTS = ("output_throughput_tok_s", "total_throughput_tok_s", "request_throughput_rps")


def _code(text: str) -> str:
    """`text` as one Markdown code span, whatever backticks it holds."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block(text: str) -> str:
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}sh\n{text}\n{fence}"


def _knobs(config: EngineConfig) -> list[str]:
    data = config.model_dump(mode="json", exclude_defaults=True,
                             exclude={"engine", "model", "host", "port"})
    return [f"{_code(f'{k}={json.dumps(v) if isinstance(v, dict) else v}')}"
            for k, v in data.items()]


def _parallelism(config: EngineConfig) -> str:
    """`tp=…, pp=… → N GPU(s) per replica`, with dp/ep and the layout when experts split."""
    text = f"tp={config.tp}, pp={config.pp}"
    if config.ep > 1:
        text += f", dp={config.dp}, ep={config.ep} ({parallel_layout(config)})"
    return f"{text} → {config.gpus_per_instance} GPU(s) per replica"


def _served_model(request: ExportRequest, config: EngineConfig, plugin: EnginePlugin) -> str:
    """The model line's text: the checkpoint served, and when it replaces the one asked for,
    which one it replaces and the name clients request."""
    text = _code(config.model)
    if config.model != request.config.model:
        text += (f" (the pre-quantized {config.weight_quantization} checkpoint of "
                 f"{_code(request.config.model)}: {config.engine} does not quantize it on load;"
                 f" clients request {_code(plugin.readiness(config).served_model_name)})")
    return text


def render_report(request: ExportRequest, config: EngineConfig, plugin: EnginePlugin,
                  files: dict[str, str], *, local_script: str, image: str,
                  host_port: int) -> str:
    """REPORT.md of `request`, whose bundle launches `config` (see `bundle.served_config`)."""
    hardware = request.hardware
    gpu = request.gpu or (hardware.gpu_name if hardware else None)
    count = request.gpu_count or (hardware.gpu_count if hardware else None)
    target = (gpu or "GPU not given") + (f" × {count}" if count else "")
    lines = [
        f"# ServeFit export: {config.engine} serving {_code(config.model)}", "",
        *([f"> **Not deployable as it is.** {request.not_deployable}", ""]
          if request.not_deployable else []),
        f"- Engine: {config.engine} (image {_code(image)})",
        f"- Model: {_served_model(request, config, plugin)}",
        f"- GPU: {target}; {_parallelism(config)}",
        f"- Key knobs: {', '.join(_knobs(config)) or 'engine defaults'}",
        f"- Endpoint: http://localhost:{host_port} (readiness: GET "
        f"{plugin.readiness(config).health_path})",
        "", "## Launch", "",
        f"Locally (`./{LAUNCH_SCRIPT}`) runs:", "",
        _block(local_script.rstrip("\n").splitlines()[-1].removeprefix("exec ")), "",
        f"In docker: `./{DOCKER_SCRIPT}`, `docker compose up -d`, or "
        f"`kubectl apply -f {KUBERNETES_FILE}`. Then `./{BENCH_SCRIPT} [TRACE]` replays the "
        "trace against it with `python -m app bench` (a ServeFit checkout or image on the "
        "client machine)" + (f"; TRACE defaults to {_code(PurePath(request.profile).name)} "
                             "next to the script" if request.profile else "") + ".",
        "", "## Capability check", "",
    ]
    if request.hardware is not None:
        lines.append(f"Passed: {config.engine} accepts this config on "
                     f"{request.hardware.gpu_count} × {request.hardware.gpu_name}.")
    else:
        lines.append("Skipped: the request gave no hardware/model facts.")
    lines += ["", "## Predicted", ""]
    if request.predicted is not None:
        lines += [f"- {name}: {value:g}" + ("" if span is None else f" ({span[0]:g}-{span[1]:g})")
                  for name, value, span in _figures(request, request.predicted)]
        lines += ["", _band_line(request, request.predicted.band)]
    else:
        lines.append("None were given in the request.")
    if request.capacity is not None:
        lines += ["", *_capacity_lines(request.capacity)]
    lines += ["", "## Reasons", ""]
    lines += [f"- {r}" for r in request.reasons] or ["None were given in the request."]
    if request.warnings:
        lines += ["", "## Warnings", "", *[f"- {w}" for w in request.warnings]]
    lines += ["", "## Files", "", *[f"- `{name}`" for name in [*files, REPORT_FILE]]]
    return "\n".join(lines) + "\n"


def _figures(request: ExportRequest, p: ServingFigures
             ) -> list[tuple[str, float, tuple[float, float] | None]]:
    """(name, value, its (low, high) interval or None) of each predicted figure REPORT.md
    lists, latencies in ms under flat names (`ttft_p95_ms`; one with no value is left out):
    the latencies' p50/p95/p99, the throughputs, the KV headroom, goodput and $/Mtok today
    (the last three without an interval)."""
    out: list[tuple[str, float, tuple[float, float] | None]] = []
    for name in LATENCIES:
        for q in ("p50", "p95", "p99"):
            if (value := getattr(getattr(p, name), q)) is not None:
                span = p.interval_range(name, q)
                out.append((f"{name[:-2]}_{q}_ms", value * 1e3,
                            None if span is None else (span[0] * 1e3, span[1] * 1e3)))
    out += [(name, getattr(p, name), p.interval_range(name)) for name in THROUGHPUTS]
    extra = (("kv_headroom_fraction", request.kv_headroom_fraction),
             ("goodput_rps", p.goodput_rps), ("usd_per_mtok_today", request.usd_per_mtok_today))
    return out + [(name, value, None) for name, value in extra if value is not None]


def _capacity_lines(capacity: Capacity) -> list[str]:
    """The SLO boundary, the growth table and the load curve (a table and a Mermaid chart)."""
    limits = [f"p95 {name} {value * 1e3:,.4g} ms" for name, value in
              (("TTFT", capacity.slo_ttft_s), ("TPOT", capacity.slo_tpot_s)) if value is not None]
    lines = ["## How far it holds", "",
             f"SLO boundary ({' and '.join(limits) or 'no limit'}): "
             f"{boundary_text(capacity.pick)}. Today's load: {capacity.today_rps:,.3g} req/s "
             f"(trace mean {capacity.mean_rps:,.3g} req/s"
             + (f", peak {capacity.peak_rps:,.3g} req/s over {capacity.peak_window_s:g} s"
                if capacity.peak_rps is not None and capacity.peak_window_s else "") + ").",
             "", f"Found with {capacity.method}.", ""]
    lines += [f"- {b.label}: {boundary_text(b)}" for b in capacity.alternatives]
    rows = growth_table(capacity)
    if rows:
        heads = list(rows[0])
        lines += ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads),
                  *("| " + " | ".join(r[h] for h in heads) + " |" for r in rows)]
    if capacity.day is not None:
        lines += ["", f"Over the trace's span: {day_text(capacity.day)}; sized from "
                  f"{capacity.day.method}.", "",
                  "| window start (s) | req/s | replicas | GPUs | headroom |",
                  "|---|---|---|---|---|",
                  *(f"| {w.t_s:,.0f} | {w.rate_rps:,.3g} | {w.replicas} | {w.gpus} | "
                    + ("n/a" if w.headroom is None else f"{w.headroom:,.2g}×") + " |"
                    for w in capacity.day.windows)]
    lines += ["", "Predicted p95 latency against load (the boundary's search):", "",
              "| req/s | p95 TTFT ms | p95 TPOT ms | holds |", "|---|---|---|---|"]
    for p in capacity.curve.points:
        lines.append(f"| {p.rate_rps:,.3g} | {_ms(p.ttft_p95_s)} | {_ms(p.tpot_p95_s)} | "
                     f"{'yes' if p.holds else 'no'} |")
    return [*lines, "", *_mermaid(capacity)]


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:,.4g}"


def _mermaid(capacity: Capacity) -> list[str]:
    """A Mermaid xychart of p95 TTFT against load with the SLO line (rendered by GitHub,
    GitLab and most Markdown viewers; plain text elsewhere)."""
    points = [p for p in capacity.curve.points if p.ttft_p95_s is not None]
    if len(points) < 2:
        return []
    xs = ", ".join(f'"{p.rate_rps:.3g}"' for p in points)
    ttft = ", ".join(f"{min(p.ttft_p95_s or 0.0, 1e6) * 1e3:.4g}" for p in points)
    lines = ["```mermaid", "xychart-beta",
             '    title "Predicted p95 TTFT (ms) against load (req/s)"',
             f"    x-axis [{xs}]", f"    line [{ttft}]"]
    if capacity.slo_ttft_s is not None:
        slo = ", ".join(f"{capacity.slo_ttft_s * 1e3:.4g}" for _ in points)
        lines.append(f"    line [{slo}]")
    return [*lines, "```", "", "Lines: the predicted p95 TTFT"
            + (", the p95 TTFT SLO" if capacity.slo_ttft_s is not None else "")
            + f". Binding limit past the boundary: {LIMIT_TEXT[capacity.pick.binding]}."]


def _band_line(request: ExportRequest, band: Band | None) -> str:
    """How far the predicted figures can be trusted: their band, cell and coverage, or
    plainly that no published measurement covers them."""
    if band is not None:
        return (f"Error band: ±{band.median_ape * 100:.0f} % (median error on sources left "
                f"out of the fit) for cell {_code(band.cell)}, covered by {band.rows} "
                "held-out measurements.")
    if request.calibration_cell is not None:
        return (f"Uncalibrated: no published measurement covers cell "
                f"{_code(request.calibration_cell)}; the figures are the model's alone "
                "(no error band).")
    return "Uncalibrated: no error band was given; how far these figures can be trusted is unknown."
