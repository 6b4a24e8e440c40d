"""Stored runs side by side: steady throughput, latency distributions, burst spike and
recovery (burst runs only) and long-run stability (soak runs only), from each run's stored
summary and analysis (`compare_runs`).
"""

from __future__ import annotations

from typing import Literal

from core.figures import Latency
from core.records import Record
from profiler.workspace import Workspace
from runners.benchmark.store import RunStatus
from runners.benchmark.stored_runs import load_run, run_summary


class ThroughputRow(Record):

    run_id: str
    kind: str
    status: RunStatus
    completed: int
    error_rate: float
    request_throughput_rps: float
    output_throughput_tok_s: float
    goodput_rps: float


class LatencyRow(Record):

    run_id: str
    metric: Literal["ttft", "tpot", "itl", "e2e"]
    latency: Latency


class BurstRow(Record):

    run_id: str
    baseline_ttft_p50_s: float | None
    peak_ttft_p50_s: float | None
    ttft_spike_ratio: float | None
    peak_queue_depth: float | None
    recovery_s: float | None


class StabilityRow(Record):

    run_id: str
    ttft_p50_ratio: float | None
    ttft_p95_ratio: float | None
    throughput_ratio: float | None
    ttft_p50_slope_s_per_s: float | None


class Comparison(Record):
    """Runs side by side: steady throughput, latency distributions, burst spike/recovery (burst
    runs only) and long-run stability (soak runs only)."""

    throughput: list[ThroughputRow]
    latency: list[LatencyRow]
    burst: list[BurstRow]
    stability: list[StabilityRow]


def compare_runs(workspace: Workspace, run_ids: list[str]) -> Comparison:
    """The comparison tables for `run_ids`, from each run's stored summary and analysis.

    A run stopped before its summary was written is summarized from its stored rows.

    Raises:
        WorkspaceError: an unknown run id.
    """
    out = Comparison(throughput=[], latency=[], burst=[], stability=[])
    for run_id in run_ids:
        record = load_run(workspace, run_id)
        info = record.info
        summary = run_summary(record)
        out.throughput.append(ThroughputRow(
            run_id=run_id, kind=info.kind, status=info.status, completed=summary.completed,
            error_rate=summary.error_rate,
            request_throughput_rps=summary.request_throughput_rps,
            output_throughput_tok_s=summary.output_throughput_tok_s,
            goodput_rps=summary.goodput_rps))
        for metric in ("ttft", "tpot", "itl", "e2e"):
            d = getattr(summary, f"{metric}_s")
            out.latency.append(LatencyRow(run_id=run_id, metric=metric, latency=d))
        analysis = info.analysis or {}
        if "burst" in analysis:
            b = analysis["burst"]
            out.burst.append(BurstRow(run_id=run_id, **{k: b[k] for k in BurstRow.model_fields
                                                         if k != "run_id"}))
        if "soak" in analysis:
            s = analysis["soak"]
            out.stability.append(StabilityRow(
                run_id=run_id, **{k: s[k] for k in StabilityRow.model_fields if k != "run_id"}))
    return out
