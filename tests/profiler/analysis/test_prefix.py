"""Tests for profiler.analysis.prefix: LRU and infinite prefix-cache reuse over block hashes.

Expected values come from a plain-Python reference written here (an OrderedDict LRU and a
set), run on the raw trace files read with pandas -- never from the code under test.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.analysis.prefix import dense_ids, infinite_hit_ratio, lru_hit_ratio, lru_hit_ratios
from tests.reference import infinite_hits, lru_hits

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
CAPACITIES = (1000, 10_000, 100_000)


# ---------------------------------------------------------------- reference implementation


def flatten(requests: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(requests) + 1, np.int64)
    offsets[1:] = np.cumsum([len(b) for b in requests])
    flat = [h for blocks in requests for h in blocks]
    return np.array(flat, dtype=np.uint64), offsets


def lru(requests: Sequence[Sequence[int]], capacity: int) -> float:
    return lru_hit_ratio(*flatten(requests), capacity)


def infinite(requests: Sequence[Sequence[int]]) -> float:
    return infinite_hit_ratio(*flatten(requests))


# ---------------------------------------------------------------- real Mooncake traces


@pytest.fixture(scope="module", params=["conversation", "synthetic"])
def mooncake(request: pytest.FixtureRequest) -> tuple[str, list[list[int]]]:
    path = TRACES / f"mooncake_{request.param}_trace.jsonl.gz"
    frame = pd.read_json(path, lines=True, compression="gzip")
    # Rows are already in arrival order; keep the file's order as the replay order.
    assert frame["timestamp"].is_monotonic_increasing
    return request.param, [list(map(int, ids)) for ids in frame["hash_ids"]]


def test_mooncake_matches_reference(mooncake: tuple[str, list[list[int]]]) -> None:
    _, requests = mooncake
    total = sum(map(len, requests))
    hashes, offsets = flatten(requests)
    got = lru_hit_ratios(hashes, offsets, CAPACITIES)
    assert set(got) == set(CAPACITIES)
    for capacity in CAPACITIES:
        expected = lru_hits(requests, capacity) / total
        assert got[capacity] == pytest.approx(expected, rel=1e-9, abs=0)
        assert lru_hit_ratio(hashes, offsets, capacity) == got[capacity]
    expected_inf = infinite_hits(requests) / total
    assert infinite_hit_ratio(hashes, offsets) == pytest.approx(expected_inf, rel=1e-9, abs=0)


def first_appearance_ids(hashes: np.ndarray) -> np.ndarray:
    """Dense ids numbered by each hash's first position, with numpy alone."""
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse]


def test_dense_ids_on_mooncake(mooncake: tuple[str, list[list[int]]]) -> None:
    _, requests = mooncake
    hashes, offsets = flatten(requests)
    ids, n_unique, n_reused = dense_ids(hashes, offsets)
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, first_appearance_ids(hashes))
    assert n_unique == len(set(hashes.tolist()))
    seen: set[int] = set()
    reused = 0
    for blocks in requests:
        reused += sum(b in seen for b in blocks)
        seen.update(blocks)
    assert n_reused == reused


def test_dense_ids_of_no_blocks() -> None:
    ids, n_unique, n_reused = dense_ids(np.zeros(0, np.uint64), np.zeros(3, np.int64))
    assert (len(ids), n_unique, n_reused) == (0, 0, 0)


# Published figures (Mooncake FAST'25 trace release): infinite-cache reuse and the hit ratio
# of a 10,000-block LRU. An independent check that our semantics are the usual ones.
PUBLISHED = {"conversation": (0.366, 0.211), "synthetic": (0.640, 0.423)}


def test_mooncake_matches_published_figures(mooncake: tuple[str, list[list[int]]]) -> None:
    name, requests = mooncake
    hashes, offsets = flatten(requests)
    published_inf, published_lru = PUBLISHED[name]
    assert infinite_hit_ratio(hashes, offsets) == pytest.approx(published_inf, abs=0.001)
    assert lru_hit_ratio(hashes, offsets, 10_000) == pytest.approx(published_lru, abs=0.001)


# ---------------------------------------------------------------- hand-made semantics


def test_only_the_leading_run_hits() -> None:
    # Blocks 2 and 3 are cached, but block 9 before them misses, so nothing is reusable.
    assert lru([[1, 2, 3], [9, 2, 3]], 100) == 0.0
    assert lru([[1, 2, 3], [1, 9, 3]], 100) == 1 / 6
    # The infinite bound counts every previously seen block, wherever it sits.
    assert infinite([[1, 2, 3], [9, 2, 3]]) == 2 / 6


def test_last_block_inserted_first() -> None:
    # Capacity 2, three blocks: 3 then 2 then 1 go in, 1 evicts 3; the prefix [1, 2] stays.
    assert lru([[1, 2, 3], [1, 2]], 2) == 2 / 5
    assert lru([[1, 2, 3], [3]], 2) == 0.0


def test_prefix_outlives_its_tail() -> None:
    # After [1, 2, 3] the LRU order is 3 < 2 < 1, so block 4 evicts the tail 3.
    assert lru([[1, 2, 3], [4], [1, 2, 3]], 3) == 2 / 7
    # Reusing the prefix refreshes it, so the next eviction takes 4, not 1.
    assert lru([[1, 2, 3], [4], [1, 2], [5], [1, 2]], 3) == 4 / 9


def test_capacity_one() -> None:
    assert lru([[7], [7], [8], [7]], 1) == 1 / 4
    assert lru([[7, 8], [7, 8]], 1) == 1 / 4


def test_repeat_inside_one_request_is_not_reuse() -> None:
    assert infinite([[5, 5, 5]]) == 0.0
    assert infinite([[5, 5], [5]]) == 1 / 3
    assert lru([[5, 5, 5]], 4) == 0.0
    assert lru([[5, 5, 5], [5, 5]], 1) == 2 / 5


def test_zero_block_requests() -> None:
    requests = [[], [1, 2], [], [], [1], []]
    assert lru(requests, 10) == 1 / 3
    assert infinite(requests) == 1 / 3


def test_full_uint64_range() -> None:
    big = [2**64 - 1, 2**63, 0, 2**63 - 1]
    requests = [big, big[:2], [2**64 - 2], big]
    total = sum(map(len, requests))
    assert lru(requests, 3) == lru_hits(requests, 3) / total
    assert infinite(requests) == infinite_hits(requests) / total


def test_table_growth_and_a_request_larger_than_the_table() -> None:
    # Thousands of distinct hashes outgrow the smallest hash table (and one request alone
    # exceeds its load limit), exercising the resize path.
    rng = np.random.default_rng(7)
    pool = rng.integers(0, 2**64, 6000, dtype=np.uint64, endpoint=False).tolist()
    requests = [
        pool[:3000],
        pool[:10],
        pool[3000:3500],
        *[pool[i : i + 40] for i in range(0, 6000, 37)],
    ]
    requests += [pool[:3000]]
    total = sum(map(len, requests))
    hashes, offsets = flatten(requests)
    for capacity in (1, 50, 3000, 10_000):
        assert lru_hit_ratio(hashes, offsets, capacity) == lru_hits(requests, capacity) / total
    assert infinite_hit_ratio(hashes, offsets) == infinite_hits(requests) / total


def test_lru_hit_ratios_matches_single_calls() -> None:
    requests = [[1, 2, 3], [1, 2, 4], [5], [1, 2, 3, 6], [5, 7]]
    hashes, offsets = flatten(requests)
    got = lru_hit_ratios(hashes, offsets, [3, 1, 3, np.int64(2), 10**12])
    assert list(got) == [3, 1, 2, 10**12]
    for capacity, ratio in got.items():
        assert ratio == lru_hit_ratio(hashes, offsets, capacity)
    assert lru_hit_ratios(hashes, offsets, []) == {}


def test_strided_input_views() -> None:
    requests = [[1, 2, 3], [1, 2], [4, 1]]
    hashes, offsets = flatten(requests)
    spread = np.zeros(2 * len(hashes), np.uint64)
    spread[::2] = hashes
    assert lru_hit_ratio(spread[::2], offsets, 2) == lru_hit_ratio(hashes, offsets, 2)
    assert infinite_hit_ratio(spread[::2], offsets) == 3 / 7


def test_import_is_cheap_and_side_effect_free() -> None:
    code = ("import sys, profiler.analysis.prefix; "
            "assert 'numba' not in sys.modules, 'numba imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])


# ---------------------------------------------------------------- input validation

GOOD_H = np.array([1, 2, 3], np.uint64)
GOOD_O = np.array([0, 2, 3], np.int64)


@pytest.mark.parametrize(
    ("hashes", "offsets", "match"),
    [
        (GOOD_H.astype(np.int64), GOOD_O, "hashes must be .* uint64"),
        ([1, 2, 3], GOOD_O, "hashes must be .* uint64"),
        (GOOD_H.reshape(1, 3), GOOD_O, "hashes must be a 1-D"),
        (GOOD_H, GOOD_O.astype(np.int32), "offsets must be .* int64"),
        (GOOD_H, np.array([], np.int64), "n_requests \\+ 1"),
        (GOOD_H, np.array([1, 2, 3], np.int64), "offsets\\[0\\] must be 0"),
        (GOOD_H, np.array([0, 2], np.int64), "offsets\\[-1\\] must equal len\\(hashes\\)"),
        (GOOD_H, np.array([0, 2, 1, 3], np.int64), "non-decreasing; offsets\\[1\\] = 2"),
        (np.array([], np.uint64), np.array([0, 0, 0], np.int64), "no prompt blocks"),
        (np.array([], np.uint64), np.array([0], np.int64), "no prompt blocks"),
    ],
)
def test_bad_trace_layout_raises(hashes: object, offsets: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        lru_hit_ratio(hashes, offsets, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=match):
        lru_hit_ratios(hashes, offsets, [4])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=match):
        infinite_hit_ratio(hashes, offsets)  # type: ignore[arg-type]


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "8", None])
def test_bad_capacity_raises(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        lru_hit_ratio(GOOD_H, GOOD_O, capacity)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity"):
        lru_hit_ratios(GOOD_H, GOOD_O, [4, capacity])  # type: ignore[list-item]


# ---------------------------------------------------------------- property test

_traces = st.lists(
    st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 2**64 - 1, 2**40]), max_size=10),
    min_size=1,
    max_size=14,
).filter(any)  # at least one block in the trace


@settings(max_examples=200, deadline=None)
@given(requests=_traces, capacity=st.integers(min_value=1, max_value=8))
def test_matches_reference_on_random_traces(requests: list[list[int]], capacity: int) -> None:
    total = sum(map(len, requests))
    hashes, offsets = flatten(requests)
    assert lru_hit_ratio(hashes, offsets, capacity) == lru_hits(requests, capacity) / total
    assert infinite_hit_ratio(hashes, offsets) == infinite_hits(requests) / total
