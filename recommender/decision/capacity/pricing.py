"""What serving costs: USD per million output tokens of a deployment, at today's load and at
its SLO boundary, from a GPU-hour price.

Owns the price a recommendation uses (the user's `gpu_price_per_hour_usd`, else the
catalog's public on-demand list price with its source and date; None: no figure) and the
$/Mtok arithmetic: the deployment's GPUs × price per hour over the output tokens it serves
in that hour. At today's load that is the candidate's predicted output throughput; at the
boundary, the boundary's requests/s × the window's mean output tokens; in the growth table,
the pick's GPUs at that load over factor × today's output tokens. No simulation, no I/O.
"""

from __future__ import annotations

from recommender.catalog.specs import GPU, GpuPrice
from recommender.decision.recommendation import Recommendation, RecommendRequest

USER_PRICE_SOURCE = "--gpu-price-per-hour (given by the user)"


def price_of(request: RecommendRequest, gpu: GPU) -> GpuPrice | None:
    """The GPU-hour price the figures use: the user's, else the catalog's."""
    if request.gpu_price_per_hour_usd is not None:
        return GpuPrice(usd_per_hour=request.gpu_price_per_hour_usd, source=USER_PRICE_SOURCE)
    return gpu.price


def usd_per_mtok(gpus: int, price: GpuPrice | None, output_tok_s: float) -> float | None:
    """USD per million output tokens of `gpus` serving `output_tok_s`; None without a price
    or a throughput."""
    if price is None or output_tok_s <= 0:
        return None
    return gpus * price.usd_per_hour / (output_tok_s * 3600.0) * 1e6


def apply_prices(rec: Recommendation, price: GpuPrice | None, mean_output_tokens: float
                 ) -> None:
    """Fill every $/Mtok figure of `rec` (candidates at today's load, boundaries, growth
    rows, the day plan's GPU-hours) from `price`, in place."""
    rec.gpu_price = price
    for c in rec.candidates:  # the pick and each engine's best among them
        c.usd_per_mtok = usd_per_mtok(c.replicas * c.config.gpus_per_instance, price,
                                      c.predicted.output_throughput_tok_s)
    cap = rec.capacity
    if cap is None:
        return
    for b in [cap.pick, *cap.alternatives]:
        b.usd_per_mtok = usd_per_mtok(b.gpus, price, b.rate_rps * mean_output_tokens)
    today_tok_s = cap.today_rps * mean_output_tokens
    for row in cap.growth:
        if row.pick_gpus is not None:
            row.usd_per_mtok = usd_per_mtok(row.pick_gpus, price, row.factor * today_tok_s)
    if cap.day is not None and price is not None:
        cap.day.usd = cap.day.gpu_hours * price.usd_per_hour
        cap.day.peak_fleet_usd = cap.day.peak_fleet_gpu_hours * price.usd_per_hour
