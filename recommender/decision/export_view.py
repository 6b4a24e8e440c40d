"""The export view of a recommendation: the pick (or another engine's best) as the
`engines.export.request.ExportRequest` that the `export` command packages, built on demand
from the candidate (a Recommendation stores none), with the reasons an exported alternative
is not the pick; and `saved_export`, the pick's request from a saved rec.json.
"""

from __future__ import annotations

from typing import Any

from core.capacity import Capacity
from core.figures import ServingFigures
from engines.export.request import ExportRequest
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.recommendation import (
    UNSERVABLE,
    Candidate,
    Recommendation,
    RecWarning,
    read_recommendation,
)


def export_view(rec: Recommendation) -> ExportRequest:
    """The pick as an `engines.export.request.ExportRequest` (what `export` packages), with
    the recommendation's reasons, warnings and capacity."""
    return _export(rec, rec.pick, [r.text for r in rec.reasons], rec.warnings, rec.capacity)


def alternative_export(rec: Recommendation, candidate: Candidate) -> ExportRequest:
    """`export_view` of another engine's best instead of the pick. The pick's reasons,
    warnings and capacity explain the pick, so they do not travel; the report says instead
    what this configuration is to the pick, and by the decision's own figure."""
    if candidate.label == rec.pick.label:
        return export_view(rec)
    return _export(rec, candidate, alternative_reasons(rec, candidate), [], None)


def saved_export(data: dict[str, Any]) -> ExportRequest:
    """`export_view` of a saved Recommendation's JSON object (the reader
    `engines.export.loading.load_request` takes).

    Raises:
        UsageError: a Recommendation saved in the shape before the pick was an index.
        ValidationError: an invalid field.
    """
    return export_view(read_recommendation(data))


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


def _export(rec: Recommendation, c: Candidate, reasons: list[str], warnings: list[RecWarning],
            capacity: Capacity | None) -> ExportRequest:
    """`c` as an ExportRequest on the recommendation's GPUs, for its trace: its figures (as
    serving figures, with its KV headroom and $/Mtok today), `reasons`, `warnings` (an
    unservable one leading the report) and `capacity`."""
    p = c.predicted
    gpu, model = get_gpu(rec.gpu), get_model(rec.request.model)
    figures = ServingFigures(**{name: getattr(p, name) for name in ServingFigures.model_fields})
    return ExportRequest(
        config=c.config, gpu=rec.gpu, gpu_count=rec.gpus,
        hardware=hardware_facts(gpu, rec.gpus), model_facts=model_facts(model),
        profile=rec.request.source, predicted=figures,
        kv_headroom_fraction=p.kv_headroom_fraction, usd_per_mtok_today=c.usd_per_mtok,
        calibration_cell=p.calibration_cell, reasons=reasons,
        warnings=[w.text for w in warnings],
        not_deployable=next((w.text for w in warnings if w.code == UNSERVABLE), None),
        capacity=capacity,
    )
