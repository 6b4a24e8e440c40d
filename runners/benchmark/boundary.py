"""The measured SLO boundary: each step of a `boundary` workload judged, the stop rule, and
the boundary it reports.

A step holds when its requests meet the p95 SLOs, at most ERROR_SHARE of them failed, and
no queue grew (the median TTFT of the step's last third is not QUEUE_GROWTH times its first
third's). The run stops at the first step that does not hold (or when the steps run out);
the measured boundary is the offered rate of the last step that held. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from core.records import Record
from runners.benchmark.metrics import summarize
from runners.load.schemas import RequestResult

ERROR_SHARE = 0.01
QUEUE_GROWTH = 2.0
MIN_QUEUE_GROWTH_S = 0.05  # TTFT growth below this is noise, not a queue


class BoundaryStep(Record):
    """One step of a boundary run: the load offered and what it got."""

    step: int = Field(ge=0)
    multiple: float = Field(gt=0, description="Load over the first step's.")
    offered_rps: float = Field(ge=0, description="Requests over the span of their sends.")
    sent: int = Field(ge=0)
    completed: int = Field(ge=0)
    errors: int = Field(ge=0)
    throughput_rps: float = Field(ge=0, description="Completed per second over the step.")
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    ttft_growth: float | None = Field(description="Median TTFT of the last third of the "
                                      "step's requests over the first third's.")
    holds: bool
    broke: str | None = Field(description="What broke: 'slo_ttft', 'slo_tpot', 'errors', "
                              "'queue_growth', 'not_sent' (cut short); None when it holds.")


class BoundaryAnalysis(Record):
    """The steps run and the boundary they show."""

    steps: list[BoundaryStep]
    boundary_rps: float | None = Field(description="Offered rate of the last step that held "
                                       "(None: the first step already broke).")
    capped: bool = Field(description="Every step held: the boundary is at least boundary_rps.")
    stopped_because: str = Field(description="The broken rule that stopped the run, or "
                                 "'steps ran out'.")


def judge_step(step: int, multiple: float, offered: float, results: Sequence[RequestResult],
               *, span: tuple[float, float], slo: tuple[float | None, float | None],
               unsent: int = 0) -> BoundaryStep:
    """One step's verdict from its results (`span`: its start and end stamps; `slo`: the p95
    TTFT and TPOT limits, None for none)."""
    s = summarize(results, started_at_s=span[0], ended_at_s=span[1])
    errors = sum(not r.success for r in results)
    growth = _ttft_growth(results)
    broke = None
    if unsent:
        broke = "not_sent"
    elif errors > ERROR_SHARE * max(len(results), 1):
        broke = "errors"
    elif slo[0] is not None and (s.ttft_s.p95 is None or s.ttft_s.p95 > slo[0]):
        broke = "slo_ttft"
    elif slo[1] is not None and s.tpot_s.p95 is not None and s.tpot_s.p95 > slo[1]:
        broke = "slo_tpot"
    elif growth is not None and growth[0] > QUEUE_GROWTH and growth[1] > MIN_QUEUE_GROWTH_S:
        broke = "queue_growth"
    return BoundaryStep(
        step=step, multiple=multiple, offered_rps=offered, sent=len(results),
        completed=s.completed, errors=errors, throughput_rps=s.request_throughput_rps,
        ttft_p95_s=s.ttft_s.p95, tpot_p95_s=s.tpot_s.p95,
        ttft_growth=None if growth is None else growth[0], holds=broke is None, broke=broke)


def _ttft_growth(results: Sequence[RequestResult]) -> tuple[float, float] | None:
    """(last third's median TTFT over the first third's, their difference in s), requests in
    send order; None with fewer than 6 successes."""
    ok = sorted((r for r in results if r.success and r.ttft_s is not None),
                key=lambda r: r.sent_at_s)
    if len(ok) < 6:
        return None
    third = len(ok) // 3
    first = float(np.median([r.ttft_s for r in ok[:third]]))
    last = float(np.median([r.ttft_s for r in ok[-third:]]))
    return (last / first if first > 0 else float("inf")), last - first


def should_stop(steps: Sequence[BoundaryStep]) -> bool:
    """The stop rule: the last step run broke."""
    return bool(steps) and not steps[-1].holds


def analyze_boundary(steps: Sequence[BoundaryStep]) -> BoundaryAnalysis:
    """The boundary the steps show: the last step that held before the first that broke."""
    held = None
    broke = None
    for step in steps:
        if not step.holds:
            broke = step
            break
        held = step
    return BoundaryAnalysis(
        steps=list(steps), boundary_rps=None if held is None else held.offered_rps,
        capped=broke is None,
        stopped_because=broke.broke or "" if broke is not None else "steps ran out")
