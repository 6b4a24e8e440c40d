"""What one benchmark run produced (`BenchReport`, also stored under its run id) and how a
finished run becomes one (`build_report`): its summary, what the engine's /metrics said
(`ScrapeSummary`), the SLO verdict, and its workload's analysis (sweep levels and knee, burst,
soak or boundary). `report_json` is `bench --json`, where milliseconds come out (DESIGN §2.4).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from core.records import MutableRecord, Record
from core.run_shape import Boundary, Sweep
from runners.benchmark.analyses import (
    BurstAnalysis,
    Knee,
    SoakAnalysis,
    SweepLevel,
    analyze_burst,
    analyze_soak,
    find_knee,
)
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.boundary import BoundaryAnalysis, analyze_boundary
from runners.benchmark.live_run import LiveRun
from runners.benchmark.metrics import Summary, summarize, summary_json
from runners.load.process import WorkloadOutcome
from runners.load.schedule import Schedule
from runners.server.engine_metrics import MetricSample, SpecMeasured, hit_rate, spec_measured
from runners.server.scrape import Scraper


class ScrapeSummary(Record):
    """What the engine's /metrics said over the run."""

    scrapes: int
    failures: int
    last_error: str | None
    prefix_cache_hit_rate: float | None = Field(description="Δhits / Δqueries over the run.")
    prefix_cache_hits_delta: float | None
    peak_queue_depth: float | None
    peak_running: float | None
    mean_kv_cache_usage: float | None
    speculative: SpecMeasured | None = Field(
        default=None, description="Speculative decoding as the engine counted it (None: no "
        "speculation, or an engine that exports no counts).")


# Mutable: the analyses (levels, knee, boundary, burst, soak) are added as the run ends.
class BenchReport(MutableRecord):
    """Everything one benchmark run produced (also stored under `run_id`)."""

    run_id: str
    status: str
    url: str
    model: str | None
    summary: Summary
    scraped: ScrapeSummary
    slo_met: bool | None = Field(description="p95 TTFT and TPOT within the given SLOs.")
    error: str | None = Field(default=None, description="Why the run failed (status failed).")
    warmup_requests: int = Field(default=0, description="Requests sent in the unmeasured warm-up.")
    levels: list[SweepLevel] | None = None
    knee: Knee | None = None
    burst: BurstAnalysis | None = None
    soak: SoakAnalysis | None = None
    boundary: BoundaryAnalysis | None = None


def sweep_levels(outcomes: list[tuple[int | None, WorkloadOutcome]]) -> list[SweepLevel]:
    out = []
    for level, o in outcomes:
        if level is None:
            continue
        s = summarize(o.results, started_at_s=o.started_at_s, ended_at_s=o.ended_at_s)
        out.append(SweepLevel(concurrency=level, request_throughput_rps=s.request_throughput_rps,
                              output_throughput_tok_s=s.output_throughput_tok_s,
                              e2e_p50_s=s.e2e_s.p50, ttft_p95_s=s.ttft_s.p95))
    return out


def build_report(live: LiveRun, run_id: str,
                 outcomes: list[tuple[int | None, WorkloadOutcome]]) -> BenchReport:
    request = live.request
    results = [r for _, o in outcomes for r in o.results]
    t0 = outcomes[0][1].started_at_s if outcomes else live.origin_s
    t1 = outcomes[-1][1].ended_at_s if outcomes else live.origin_s
    summary = summarize(results, started_at_s=t0, ended_at_s=t1,
                        slo_ttft_s=request.slo_ttft_p95_s, slo_tpot_s=request.slo_tpot_p95_s)
    schedule = live.schedules[0][1]
    metrics = _since(live.metrics, live.measured_from_s)
    report = BenchReport(run_id=run_id, status="running", url=live.url, model=request.model,
                         summary=summary, scraped=_scraped(metrics, live.scraper),
                         slo_met=_slo_met(summary, request),
                         warmup_requests=live.warmup_requests)
    if isinstance(request.workload.run, Sweep):
        levels = sweep_levels(outcomes)
        report.levels, report.knee = levels, find_knee(levels)
    elif isinstance(request.workload.run, Boundary):
        report.boundary = analyze_boundary(live.boundary_steps)
    elif outcomes and schedule.kind == "burst":
        report.burst = _burst(schedule, outcomes[0][1], live.metrics)
    elif outcomes and schedule.kind == "soak" and schedule.phases:
        report.soak = analyze_soak(results, t0=t0, t1=t0 + schedule.phases[-1].end_s,
                                   windows=len(schedule.phases))
    return report


def _burst(schedule: Schedule, outcome: WorkloadOutcome,
           metrics: list[MetricSample]) -> BurstAnalysis:
    phase = next(p for p in schedule.phases if p.name == "burst")
    t0 = outcome.started_at_s
    queue = [(m.at_s - t0, m.value) for m in metrics if m.key == "queue_depth"]
    return analyze_burst(outcome.results, t0=t0, burst_start_s=phase.start_s,
                         burst_end_s=phase.end_s, queue_depth=queue)


def _slo_met(summary: Summary, request: BenchRequest) -> bool | None:
    checks = [(request.slo_ttft_p95_s, summary.ttft_s.p95),
              (request.slo_tpot_p95_s, summary.tpot_s.p95)]
    if all(slo is None for slo, _ in checks):
        return None
    return summary.completed > 0 and all(
        slo is None or (p95 is not None and p95 <= slo) for slo, p95 in checks)


def _since(metrics: list[MetricSample], t_s: float) -> list[MetricSample]:
    """The samples of the measured part: from the last scrape at or before `t_s` on (the
    counters' baseline), so a warm-up's load and prefix hits do not count."""
    before = [m.at_s for m in metrics if m.at_s <= t_s]
    start = max(before) if before else t_s
    return [m for m in metrics if m.at_s >= start]


def _scraped(metrics: list[MetricSample], scraper: Scraper | None) -> ScrapeSummary:
    def values(key: str) -> list[float]:
        return [m.value for m in metrics if m.key == key]

    hits = values("prefix_cache_hits_tokens")
    kv = values("kv_cache_usage")
    return ScrapeSummary(
        scrapes=scraper.scrapes if scraper else 0,
        failures=scraper.failures if scraper else 0,
        last_error=scraper.last_error if scraper else None,
        prefix_cache_hit_rate=hit_rate(metrics),
        prefix_cache_hits_delta=hits[-1] - hits[0] if len(hits) >= 2 else None,
        peak_queue_depth=max(values("queue_depth"), default=None),
        peak_running=max(values("running"), default=None),
        mean_kv_cache_usage=sum(kv) / len(kv) if kv else None,
        speculative=spec_measured(metrics))


def report_json(report: BenchReport) -> dict[str, Any]:
    """`bench --json`: `predict`'s metric names (ms) plus the run's identity and analyses."""
    out: dict[str, Any] = {"run_id": report.run_id, "status": report.status, "url": report.url,
                           "error": report.error}
    out.update(summary_json(report.summary))
    out["slo_met"] = report.slo_met
    out["warmup_requests"] = report.warmup_requests
    out["scraped"] = report.scraped.model_dump()
    if report.knee is not None:
        out["knee_concurrency"] = report.knee.knee_concurrency
        out["levels"] = [lv.model_dump() for lv in report.levels or []]
    for name in ("burst", "soak", "boundary"):
        value = getattr(report, name)
        if value is not None:
            out[name] = value.model_dump()
    return out
