"""The prefix-reuse curve, for the Profile view: the hit ratio of an LRU block cache against its
size (`profiler.analysis.prefix` semantics), on a 1-2-5 grid of sizes up to the size where
nothing is evicted.
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from core.records import Record
from profiler.schema import REQUESTS_TABLE

# Capacities of the reuse curve: 1, 2, 5 x 10^k blocks up to the trace's distinct blocks.
REUSE_STEPS = (1, 2, 5)
REUSE_MIN_BLOCKS = 10

_BLOCKS_SQL = f"""
SELECT count(DISTINCT h), min(bs), max(bs) FROM (
    SELECT unnest(block_hashes) AS h, block_size AS bs FROM {REQUESTS_TABLE}
    WHERE block_hashes IS NOT NULL)
"""


class ReuseCurve(Record):
    """Prefix-cache hit ratio of an LRU block cache against its size."""

    block_size: int | None = Field(description="tokens per block, when the trace has one")
    distinct_blocks: int = Field(description="beyond this size nothing is ever evicted")
    capacity_blocks: list[int]
    hit_ratio: list[float]
    infinite_hit_ratio: float


def reuse_capacities(distinct_blocks: int) -> list[int]:
    """1, 2, 5 x 10^k block capacities from REUSE_MIN_BLOCKS, ending at `distinct_blocks`."""
    capacities, decade = [], REUSE_MIN_BLOCKS
    while decade < distinct_blocks:
        capacities += [s * decade for s in REUSE_STEPS if s * decade < distinct_blocks]
        decade *= 10
    return [*capacities, distinct_blocks]


def reuse_curve(con: Any, capacities: Sequence[int] | None = None) -> ReuseCurve | None:
    """LRU hit ratio (profiler.analysis.prefix semantics) per cache size; None without block hashes.

    Default sizes: `reuse_capacities` of the trace's distinct blocks, where the curve meets
    the infinite-cache ratio.
    """
    distinct, bs_min, bs_max = con.execute(_BLOCKS_SQL).fetchone()
    if not distinct:
        return None
    from profiler.analysis.prefix import infinite_hit_ratio, lru_hit_ratios
    from profiler.analysis.scans import flat_hashes

    hashes, offsets = flat_hashes(con)
    chosen = list(capacities) if capacities is not None else reuse_capacities(int(distinct))
    ratios = lru_hit_ratios(hashes, offsets, chosen)
    return ReuseCurve(
        block_size=int(bs_min) if bs_min is not None and bs_min == bs_max else None,
        distinct_blocks=int(distinct),
        capacity_blocks=chosen,
        hit_ratio=[float(ratios[c]) for c in chosen],
        infinite_hit_ratio=float(infinite_hit_ratio(hashes, offsets)),
    )
