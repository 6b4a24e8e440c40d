"""recommender/calibration/coverage.py: what a set of calibration rows measured."""

from __future__ import annotations

import pytest

from recommender.calibration.coverage import coverage_of
from recommender.calibration.published.parse import parse_csv


def test_coverage_of_three_rows_names_them_as_the_catalog_does():
    rows, _ = parse_csv()
    picked = [next(r for r in rows if r.engine == e) for e in ("vllm", "sglang", "trtllm")]
    cov = coverage_of(picked)
    assert cov.engines == ["sglang", "trtllm", "vllm"]
    assert cov.gpus == sorted({r.gpu for r in picked})
    assert cov.isl_min_tokens == min(r.isl for r in picked)
    assert cov.isl_max_tokens == max(r.isl for r in picked)
    assert len(cov.models) == len({r.model for r in picked})  # one catalog name per model
    assert all("/" in name for name in cov.models)  # HF ids, as `Target.model.name` has them


def test_no_rows_cover_nothing():
    with pytest.raises(ValueError, match="no calibration rows"):
        coverage_of([])
