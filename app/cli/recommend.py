"""`python -m app recommend`: parse, call `recommender.decision.recommend`, print the pick and why.

The human view shows the pick's predicted figures in ms with their error band ("±N %", or
"no calibrated cell"); `--json` prints the whole Recommendation (each candidate's band and
coverage in `predicted.band`, its cell in `predicted.calibration_cell`); `-o` writes it
atomically (nothing is written when the command fails).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from app.cli.common import COMMAND_HELP, key_values, usage_error, write_output
from core.errors import UsageError

if TYPE_CHECKING:
    from core.capacity import Capacity
    from recommender.decision.recommendation import Candidate, PredictedMetrics, Recommendation


def add_recommend(sub: Any) -> None:
    """Register the `recommend` command on the CLI's subparsers."""
    from recommender.decision.recommendation import OBJECTIVES  # the choices come from the registry

    p = sub.add_parser("recommend", help=COMMAND_HELP["recommend"])
    p.add_argument("source", metavar="TRACE|PROFILE_JSON")
    p.add_argument("--gpu", required=True, help="catalog GPU name, e.g. H100-SXM")
    p.add_argument("--gpus", type=int, default=1, help="GPUs available (default 1)")
    p.add_argument("--model", required=True, help="catalog name, HF id or config.json path")
    p.add_argument("--slo-ttft-p95-ms", type=float, metavar="MS", help="p95 TTFT target")
    p.add_argument("--slo-tpot-p95-ms", type=float, metavar="MS", help="p95 TPOT target")
    p.add_argument("--objective", choices=list(OBJECTIVES), default="goodput",
                   help="; ".join(f"{k}: {v}" for k, v in OBJECTIVES.items()))
    p.add_argument("--max-requests", type=int, default=20_000, metavar="N",
                   help="cap on the simulated window (the busiest N requests)")
    p.add_argument("--workspace", metavar="PATH", help="DuckDB workspace to ingest into "
                   "(default: a temporary one)")
    p.add_argument("--arrival-rate", type=float, metavar="RPS", help="Poisson arrivals at "
                   "RPS req/s for a trace (or profile) without timestamps")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice")
    p.add_argument("--gpu-price-per-hour", type=float, metavar="USD", help="USD per GPU-hour "
                   "for the $/Mtok figures (default: the catalog's public on-demand list "
                   "price, with its source)")
    p.add_argument("--spec-acceptance", action="append", default=[], metavar="METHOD=RATE",
                   help="per-token speculative acceptance measured on your deployment (the "
                        "bench report's scraped.speculative.acceptance), e.g. ngram=0.31; "
                        "repeatable, one per method")
    p.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    p.add_argument("-o", "--output", metavar="REC_JSON", help="also write it here "
                   "(`export REC_JSON` packages the pick)")
    p.add_argument("--progress", action="store_true", help="report search progress on stderr")
    p.set_defaults(handler=cmd_recommend)


# Request fields whose flag is not the field's name (units differ: the flags take ms and USD).
FLAGS = {"gpu_price_per_hour_usd": "--gpu-price-per-hour", "arrival_rate_rps": "--arrival-rate",
         "slo_ttft_p95_s": "--slo-ttft-p95-ms", "slo_tpot_p95_s": "--slo-tpot-p95-ms"}


def cmd_recommend(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from profiler.workspace import Workspace
    from recommender.decision.recommend import recommend_trace
    from recommender.decision.recommendation import RecommendRequest

    try:
        request = RecommendRequest(
            source=args.source, gpu=args.gpu, gpus=args.gpus, model=args.model,
            slo_ttft_p95_s=_seconds(args.slo_ttft_p95_ms),
            slo_tpot_p95_s=_seconds(args.slo_tpot_p95_ms), objective=args.objective,
            max_requests=args.max_requests, seed=args.seed,
            arrival_rate_rps=args.arrival_rate,
            gpu_price_per_hour_usd=args.gpu_price_per_hour,
            # strings: the record validates methods and rates (pydantic coerces)
            spec_acceptance=_acceptances(args.spec_acceptance))  # type: ignore[arg-type]
    except ValidationError as exc:
        raise usage_error(exc, option=True, flags=FLAGS) from None
    workspace = Workspace.resolve(args.workspace) if args.workspace else None
    progress = _progress if args.progress else None
    rec = recommend_trace(request, workspace=workspace, progress=progress)
    text = rec.model_dump_json(indent=2)
    if args.output:
        write_output(args.output, text + "\n")
    print(text if args.json else recommendation_text(rec))
    return 0


def _acceptances(items: list[str]) -> dict[str, str]:
    """`--spec-acceptance METHOD=RATE` items by method (the request record validates both).

    Raises:
        UsageError: a malformed item, or a method given twice.
    """
    pairs = key_values(items, "--spec-acceptance", "METHOD=RATE")
    methods = [method for method, _ in pairs]
    if len(set(methods)) < len(methods):
        raise UsageError(f"--spec-acceptance takes each method once, got {', '.join(items)}")
    return dict(pairs)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _progress(fraction: float, what: str) -> None:
    print(f"[{fraction:4.0%}] {what}", file=sys.stderr)


def recommendation_text(rec: Recommendation) -> str:
    """The pick, its predicted figures in ms and their band, the reasons, warnings and
    alternatives."""
    # imported here: `--help` stays instant
    from app.render.figures import band_text, interval_text
    from app.render.recommendation import decision_line, price_text
    from recommender.decision.recommendation import UNSERVABLE

    pick = rec.pick
    fig = pick.predicted
    lines = [
        *(f"CANNOT    {w.text}" for w in rec.warnings if w.code == UNSERVABLE),
        f"Pick      {pick.label}  ({rec.gpus}× {rec.gpu}, {rec.model})",
        *([f"Decided   {decision_line(rec.decision)}"] if rec.decision else []),
        f"Window    {rec.window}",
        f"Search    {rec.candidates_simulated} simulations in {rec.search_time_s:.1f} s, "
        f"{len(rec.candidates)} candidates on the whole window",
        "Predicted " + _latencies(fig),
        "Band      " + band_text(fig.band, fig.calibration_cell),
        *(["Interval  " + interval_text(fig)] if fig.intervals else []),
        f"          {fig.output_throughput_tok_s:,.0f} output tok/s, "
        f"{fig.request_throughput_rps:,.2f} req/s"
        + (f", goodput {fig.goodput_rps:,.2f} req/s" if fig.goodput_rps is not None else "")
        + f", KV headroom {fig.kv_headroom_fraction:.0%}",
        "Why",
        *(f"  - {r.text}" for r in rec.reasons),
    ]
    lines.append("Price     " + price_text(rec.gpu_price, pick.usd_per_mtok))
    if rec.warnings:
        lines += ["Warnings", *(f"  ! {w.text}" for w in rec.warnings)]
    lines += ["Alternatives (best per engine)",
              *(_alt_row(c) for c in rec.alternatives)]
    if rec.capacity is not None:
        lines += _capacity_lines(rec.capacity)
    if rec.routing is not None:
        lines += ["Routing   " + rec.routing.gain_text,
                  *(f"  {d.criteria}: {d.share:.0%} of requests on {d.gpus} GPU(s), "
                    f"{d.config.engine} tp{d.config.tp}" for d in rec.routing.deployments)]
    return "\n".join(lines)


def _capacity_lines(capacity: Capacity) -> list[str]:
    from core.capacity_text import boundary_text, day_gpus_text, day_text, growth_table

    lines = [f"Holds     up to {boundary_text(capacity.pick)} (today "
             f"{capacity.today_rps:,.3g} req/s)",
             *(f"  {b.label}: {boundary_text(b)}" for b in capacity.alternatives),
             "Growth"]
    lines += [f"  {r['traffic']}: pick needs {r['pick needs GPUs']} GPU(s); today's "
              f"deployment {r['deployment now']}; cheapest other engine "
              f"{r['cheapest other engine']}; pick $/Mtok {r['pick $/Mtok']}"
              for r in growth_table(capacity)]
    if capacity.day is not None:
        lines += [f"Day plan  {day_text(capacity.day)}",
                  f"  GPUs per window, in order: {day_gpus_text(capacity.day)}"]
    return lines


def _ms(seconds: float | None, spec: str) -> str:
    return "n/a" if seconds is None else spec.format(seconds * 1e3)


def _latencies(fig: PredictedMetrics) -> str:
    return "  ".join(f"{label} p50 {_ms(lat.p50, '{:,.1f}')} / p95 {_ms(lat.p95, '{:,.1f}')} ms"
                     for label, lat in (("TTFT", fig.ttft_s), ("TPOT", fig.tpot_s),
                                        ("E2E", fig.e2e_s)))


def _alt_row(c: Candidate) -> str:
    p = c.predicted
    status = "ok" if c.feasible else f"infeasible: {c.rejected_reason}"
    usd = "" if c.usd_per_mtok is None else f"  ${c.usd_per_mtok:,.3g}/Mtok today"
    return (f"  {c.label:<58} p95 TTFT {_ms(p.ttft_s.p95, '{:>8,.0f}')} ms  p95 TPOT "
            f"{_ms(p.tpot_s.p95, '{:>6,.1f}')} ms  score {c.score:.4f}{usd}  {status}")
