"""A capacity answer in words (`core.capacity`'s records): the boundary's line, the day plan's
line and its GPUs per window, the growth table's text cells, and what each limit is called.
One wording for the screen (the Recommend view and the CLI) and the bundle's REPORT.md
(`engines.export.report`): core is the one layer both may import.
"""

from __future__ import annotations

from core.capacity import Boundary, Capacity, DayPlan

LIMIT_TEXT: dict[str, str] = {
    "kv_capacity": "KV cache capacity",
    "compute": "compute",
    "max_num_seqs": "the max_num_seqs cap",
    "prefill_interference": "prefill interference",
    "none": "nothing (it holds)",
}


def boundary_text(b: Boundary) -> str:
    """One line: '21.2 req/s (20.0–22.3), 3.8× the mean, 2.5× the peak; prefill interference
    binds first' (what the front ends and the export report print)."""
    text = f"{'at least ' if b.capped else ''}{b.rate_rps:,.3g} req/s"
    if b.rate_low_rps is not None and b.rate_high_rps is not None:
        text += f" ({b.rate_low_rps:,.3g}–{b.rate_high_rps:,.3g})"
    text += f", {b.multiple_of_mean:,.2g}× the trace's mean"
    if b.multiple_of_peak is not None:
        text += f", {b.multiple_of_peak:,.2g}× its peak"
    if b.binding != "none":
        text += f"; {LIMIT_TEXT[b.binding]} binds first"
    if b.usd_per_mtok is not None:
        text += f"; ${b.usd_per_mtok:,.3g} per million output tokens there"
    return text


def day_text(day: DayPlan) -> str:
    """One line: '12 windows of 5 min: 1-3 replicas, 4.1 GPU-hours against 6.0 for a fleet
    sized for the busiest window (32 % less); least headroom 1.2×'."""
    counts = [w.replicas for w in day.windows]
    saved = 1 - day.gpu_hours / day.peak_fleet_gpu_hours if day.peak_fleet_gpu_hours else 0.0
    minutes = day.window_s / 60
    size = f"{minutes / 60:g} h" if minutes >= 60 else f"{minutes:,.3g} min"
    span = (f"{min(counts)}-{max(counts)} replicas" if min(counts) < max(counts)
            else f"{max(counts)} replica{'s' if max(counts) > 1 else ''} throughout")
    text = (f"{len(day.windows)} windows of {size}: {span}, "
            f"{day.gpu_hours:,.3g} GPU-hours against {day.peak_fleet_gpu_hours:,.3g} for a "
            f"fleet sized for the busiest window ({saved:.0%} less)")
    if day.usd is not None and day.peak_fleet_usd is not None:
        text += f"; {_usd(day.usd)} against {_usd(day.peak_fleet_usd)}"
    if day.min_headroom is not None:
        text += f"; least headroom {day.min_headroom:,.2g}×"
    return text


def day_gpus_text(day: DayPlan) -> str:
    """The GPUs of each window in order, repeats run-length coded: '1 ×20, 2 ×3, 1 ×1'
    (a week of hourly windows is 168 numbers otherwise)."""
    runs: list[list[int]] = []
    for w in day.windows:
        if runs and runs[-1][0] == w.gpus:
            runs[-1][1] += 1
        else:
            runs.append([w.gpus, 1])
    return ", ".join(f"{g}" if n == 1 else f"{g} ×{n}" for g, n in runs)


def _usd(amount: float) -> str:
    return f"${amount:,.0f}" if amount >= 100 else f"${amount:,.2f}"


def growth_table(capacity: Capacity) -> list[dict[str, str]]:
    """The growth table as rows of text cells (today's traffic ×factor)."""
    def gpus(n: int | None) -> str:
        return "more than searched" if n is None else str(n)

    return [{"traffic": f"{row.factor:g}× ({row.rate_rps:,.3g} req/s)",
             "pick needs GPUs": gpus(row.pick_gpus),
             "deployment now": ("holds" if row.binding == "none"
                                    else f"breaks: {LIMIT_TEXT[row.binding]}"),
             "cheapest other engine": (f"{row.alternative} ({row.alternative_gpus} GPUs)"
                                       if row.alternative else "none holds"),
             "pick $/Mtok": ("n/a" if row.usd_per_mtok is None
                             else f"${row.usd_per_mtok:,.3g}")}
            for row in capacity.growth]
