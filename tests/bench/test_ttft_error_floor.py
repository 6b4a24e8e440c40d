"""bench/ttft_error_floor.py's held-out corrections: each shape, fitted on the other folds
only (the accuracy bench's folds), removes exactly the error it can express and no more
(synthetic rows whose measured values are built from a known shape; expected log ratios worked
out here with numpy)."""

from __future__ import annotations

import numpy as np

from recommender.calibration.cal_row import CalRow
from tests.bench.modules import bench_module

FLOOR = bench_module("ttft_error_floor", needs=("predict_accuracy",))


def _rows(families: dict[str, int], seed: int = 0) -> tuple[list[CalRow], dict, dict]:
    """TTFT rows of `families` (name → row count) with seeded predictions and decode steps."""
    rng = np.random.default_rng(seed)
    rows, predicted, step = [], {}, {}
    i = 0
    for family, n in families.items():
        for _ in range(n):
            engine = ("vllm", "sglang")[i % 2]
            rows.append(CalRow(index=i, engine=engine, model="m", gpu="g", gpus=1, tp=1,
                               precision="bf16", kv_cache_dtype="auto",
                               isl=int(rng.integers(100, 8000)), osl=100,
                               concurrency=int(rng.integers(1, 64)), num_requests=None,
                               max_num_seqs=None, gpu_memory_fraction=None, metric="ttft_s",
                               value=1.0, split="train", family=family))
            predicted[i] = float(rng.uniform(0.05, 2.0))
            step[i] = float(rng.uniform(0.005, 0.05))
            i += 1
    return rows, predicted, step


def _held(rows, predicted, step, measured) -> dict[str, np.ndarray]:
    pairs = [(r, float(np.log(measured[r.index] / predicted[r.index]))) for r in rows]
    return FLOOR.held_out_fitted(pairs, predicted, step, FLOOR.folds(rows, "family"))


def test_a_ttft_plus_k_steps_shape_shared_by_every_family_is_removed_held_out():
    rows, predicted, step = _rows({"a": 40, "b": 40, "c": 40})
    a, k = float(np.exp(0.7)), 5.0  # on the shape's grid
    measured = {i: a * predicted[i] + k * step[i] for i in predicted}
    got = _held(rows, predicted, step, measured)
    assert np.abs(got["a x TTFT + k x step"]).max() < 1e-9
    expected = np.log([measured[r.index] / predicted[r.index] for r in rows])
    assert np.allclose(got["as predicted"], expected)
    assert np.abs(got["one constant"]).max() > 0.05  # a constant cannot express it


def test_one_constant_is_the_other_families_median_shift():
    rows, predicted, step = _rows({"a": 40, "b": 40, "c": 40})
    shift = {"a": 0.1, "b": 0.5, "c": -0.3}
    measured = {r.index: predicted[r.index] * np.exp(shift[r.family]) for r in rows}
    got = _held(rows, predicted, step, measured)
    # held out, each family is corrected by the median of the others' shifts
    others = {f: np.median([s for g, s in shift.items() if g != f for _ in range(40)])
              for f in shift}
    expected = [shift[r.family] - others[r.family] for r in rows]
    assert np.allclose(got["one constant"], expected)


def test_small_families_are_held_out_together():
    # "d" and "e" are under the bench's 30 rows: one fold, so neither learns from the other
    rows, predicted, step = _rows({"a": 40, "b": 40, "d": 10, "e": 10})
    shift = {"a": 0.2, "b": 0.2, "d": 1.0, "e": 1.0}
    measured = {r.index: predicted[r.index] * np.exp(shift[r.family]) for r in rows}
    got = _held(rows, predicted, step, measured)
    pooled = np.array([r.family in ("d", "e") for r in rows])
    assert np.allclose(got["one constant"][pooled], 0.8)
    assert np.allclose(got["one constant"][~pooled], 0.0)


def test_rows_without_a_predicted_step_are_left_out_of_every_shape():
    rows, predicted, step = _rows({"a": 40, "b": 40})
    del step[0], step[1]
    measured = {i: 2 * predicted[i] for i in predicted}
    got = _held(rows, predicted, step, measured)
    assert {len(v) for v in got.values()} == {78}
