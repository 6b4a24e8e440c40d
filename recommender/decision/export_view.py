"""The export view of a recommendation: the pick (or another engine's best) as the
`engines.export.request.ExportRequest` JSON that the `export` command packages, with the
reasons an exported alternative is not the pick.
"""

from __future__ import annotations

from core.figures import LATENCIES
from engines.export.request import ExportRequest
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.recommendation import UNSERVABLE, Candidate, Recommendation

THROUGHPUTS = ("output_throughput_tok_s", "total_throughput_tok_s", "request_throughput_rps")


def alternative_export(rec: Recommendation, candidate: Candidate) -> dict:
    """`export_view` of another engine's best instead of the pick. The pick's reasons and
    warnings explain the pick, so they do not travel; the report says instead what this
    configuration is to the pick, and by the decision's own figure."""
    if candidate.label == rec.pick.label:
        return rec.export
    other = rec.model_copy(update={"pick": candidate, "reasons": [],
                                   "warnings": [], "capacity": None})
    request = export_view(other, profile_source=rec.request.source)
    request["reasons"] = alternative_reasons(rec, candidate)
    return request


def alternative_reasons(rec: Recommendation, candidate: Candidate) -> list[str]:
    """Why `candidate` is not the pick, in the decision's terms (REPORT.md's Reasons)."""
    lines = [f"Not the pick: {candidate.config.engine}'s best configuration ({candidate.label}), "
             f"exported on request; the pick is {rec.pick.config.engine} {rec.pick.label}."]
    d = rec.decision
    if d is not None and candidate.label in d.figures and d.pick in d.figures:
        tie = " (tied within the prediction's error)" if candidate.label in d.tied_with else ""
        lines.append(f"Ranked by {d.ranked_by}: {d.figures[candidate.label]:.3g} here against "
                     f"{d.figures[d.pick]:.3g} for the pick{tie}.")
    if d is not None:
        lines.append(f"The decision: {d.text}")
    if not candidate.feasible and candidate.rejected_reason:
        lines.append(f"Does not hold today's load: {candidate.rejected_reason}.")
    return lines


def export_view(rec: Recommendation, *, profile_source: str) -> dict:
    """The pick as an `engines.export.request.ExportRequest`, as JSON (what `export` reads)."""
    p = rec.pick
    figures, ranges = _figures(p), _ranges(p)
    gpu, model = get_gpu(rec.gpu), get_model(rec.request.model)
    request = ExportRequest(
        config=p.config, gpu=rec.gpu, gpu_count=rec.gpus,
        hardware=hardware_facts(gpu, rec.gpus), model_facts=model_facts(model),
        profile=profile_source, predicted=figures, predicted_range=ranges,
        band=p.predicted.band, calibration_cell=p.predicted.calibration_cell,
        reasons=[r.text for r in rec.reasons], warnings=[w.text for w in rec.warnings],
        not_deployable=next((w.text for w in rec.warnings if w.code == UNSERVABLE), None),
        capacity=rec.capacity,
    )
    return request.model_dump(mode="json")


def _figures(pick: Candidate) -> dict[str, float]:
    """The pick's figures under the export report's flat names (`ttft_p95_ms`; a latency
    with no value has no key), its throughputs, headroom, goodput and $/Mtok today."""
    p = pick.predicted
    figures: dict[str, float] = {}
    for name in LATENCIES:
        ms = getattr(p, name).ms()
        figures |= {f"{name[:-2]}_{q}_ms": ms[q] for q in ("p50", "p95", "p99")
                    if ms[q] is not None}
    figures |= {name: getattr(p, name) for name in THROUGHPUTS}
    figures["kv_headroom_fraction"] = p.kv_headroom_fraction
    if p.goodput_rps is not None:
        figures["goodput_rps"] = p.goodput_rps
    if pick.usd_per_mtok is not None:  # at today's load, at the recommendation's price
        figures["usd_per_mtok_today"] = pick.usd_per_mtok
    return figures


def _ranges(pick: Candidate) -> dict[str, tuple[float, float]]:
    """The (low, high) interval of each figure `_figures` names that has one."""
    p = pick.predicted
    ranges = {f"{name[:-2]}_{q}_ms": (r[0] * 1e3, r[1] * 1e3) for name in LATENCIES
              for q in ("p50", "p95", "p99") if (r := p.interval_range(name, q)) is not None}
    return ranges | {name: r for name in THROUGHPUTS if (r := p.interval_range(name)) is not None}
