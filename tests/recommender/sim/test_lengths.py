"""Tests for recommender/sim/lengths.py: per-request lengths drawn from a dataset's distribution.

The ShareGPT shape is re-derived here from the real ShareGPT_V3 conversations in
tests/data/traces (vllm bench serve's sampling rule, tokens ≈ characters / 4) and compared
with the stored file; the drawn means are checked against the stated ones with numpy.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from core.load import DatasetLengths, FixedLengths
from recommender.sim.lengths import draw, shape

SHAREGPT = Path(__file__).resolve().parents[2] / "data" / "traces" / "sharegpt_head1000.json.gz"


def test_sharegpt_shape_is_vllm_bench_sampling_of_the_dataset():
    with gzip.open(SHAREGPT, "rt") as f:
        conversations = json.load(f)
    want = []
    for entry in conversations:
        turns = entry["conversations"]
        if len(turns) < 2:
            continue
        p, o = (math.ceil(len(turns[k]["value"]) / 4) for k in (0, 1))
        if p >= 4 and o >= 4 and p <= 1024 and p + o <= 2048:  # vllm's is_valid_sequence
            want.append((p, o))
    assert shape("sharegpt").tolist() == [list(map(float, pair)) for pair in want]


def test_fixed_lengths_are_constant():
    inputs, outputs = draw(FixedLengths(input_tokens=300, output_tokens=70), 5, seed=1)
    assert inputs.tolist() == [300] * 5 and outputs.tolist() == [70] * 5


def test_dataset_draw_keeps_stated_means_and_spread_and_is_seeded():
    lengths = DatasetLengths(dataset="sharegpt", input_tokens=215, output_tokens=196)
    inputs, outputs = draw(lengths, 1000, seed=7)
    # Rounding each of 1000 requests moves the mean by at most 0.5 token.
    assert abs(inputs.mean() - 215) <= 0.5 and abs(outputs.mean() - 196) <= 0.5
    assert inputs.min() >= 1 and outputs.min() >= 1
    # ShareGPT's lengths spread about as wide as their mean (coefficient of variation ~1).
    assert 0.7 < outputs.std() / outputs.mean() < 1.4
    assert outputs.max() > 3 * 196
    again = draw(lengths, 1000, seed=7)
    assert np.array_equal(again[0], inputs) and np.array_equal(again[1], outputs)
    assert not np.array_equal(draw(lengths, 1000, seed=8)[1], outputs)


def test_unknown_dataset_is_refused_by_the_record():
    with pytest.raises(ValueError, match="sharegpt"):
        DatasetLengths(dataset="alpaca", input_tokens=10, output_tokens=10)  # type: ignore[arg-type]


def test_random_range_lengths_span_a_fifth_below_their_set_length():
    # bench_serving's --random-range-ratio 0.8: each length uniform on [0.8 L, L], mean
    # 0.9 L. Stated means 921 / 7372 (InferenceX's 1k / 8k) give L = 1024 / 8192.
    lengths = DatasetLengths(dataset="random-range-0.8", input_tokens=921, output_tokens=7372)
    inputs, outputs = draw(lengths, 4000, seed=2)
    for got, mean, top in ((inputs, 921, 1024), (outputs, 7372, 8192)):
        assert abs(got.mean() - mean) <= 1
        # the draw is scaled to the stated mean, so its span moves with the sample's mean
        assert got.max() <= top * 1.003 and got.min() >= 0.8 * top * 0.997
        # uniform: a quarter of the draws in each quarter of the span
        quarters = np.histogram(got, bins=4, range=(0.8 * top, top))[0] / len(got)
        assert np.all(np.abs(quarters - 0.25) < 0.04), quarters
    assert abs(np.corrcoef(inputs, outputs)[0, 1]) < 0.1  # drawn independently
