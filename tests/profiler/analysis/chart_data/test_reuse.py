"""The prefix-reuse curve equals a plain LRU replay of the trace's block hashes."""

from __future__ import annotations

import pytest

from profiler.analysis.chart_data.reuse import reuse_capacities
from tests import reference as ref


def test_reuse_curve_matches_a_plain_lru(mooncake):
    charts, _, df = mooncake
    curve = charts.prefix_reuse
    blocks = list(df["hash_ids"])
    distinct = len({b for req in blocks for b in req})
    assert curve.distinct_blocks == distinct
    assert curve.capacity_blocks[-1] == distinct
    assert curve.block_size == 512
    assert curve.infinite_hit_ratio == pytest.approx(ref.infinite_reuse(blocks))
    assert curve.hit_ratio[-1] == pytest.approx(curve.infinite_hit_ratio)
    for capacity in (100, 1_000, 10_000):
        i = curve.capacity_blocks.index(capacity)
        assert curve.hit_ratio[i] == pytest.approx(ref.lru_reuse(blocks, capacity))
    assert curve.hit_ratio == sorted(curve.hit_ratio)  # a bigger LRU never hits less here


def test_reuse_capacities_grid():
    assert reuse_capacities(7) == [7]
    assert reuse_capacities(120) == [10, 20, 50, 100, 120]
    assert reuse_capacities(100) == [10, 20, 50, 100]
