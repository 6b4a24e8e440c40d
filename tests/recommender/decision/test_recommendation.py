"""Tests for recommender/decision/recommendation.py: RecommendRequest refuses an infinite
SLO and an arrival rate past core.load's bounds (1e300 req/s printed a 300-digit rate)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from recommender.decision.recommendation import RecommendRequest

BASE = {"source": "t.csv", "gpu": "H100-SXM", "model": "m"}


@pytest.mark.parametrize("fields", [
    {"arrival_rate_rps": 1e300}, {"arrival_rate_rps": float("inf")},
    {"arrival_rate_rps": 1e-9}, {"slo_ttft_p95_s": float("inf")},
    {"slo_tpot_p95_s": float("inf")},
])
def test_unbounded_rates_and_slos_are_refused(fields: dict) -> None:
    with pytest.raises(ValidationError):
        RecommendRequest(**BASE, **fields)


def test_bounded_ones_pass() -> None:
    request = RecommendRequest(**BASE, arrival_rate_rps=1_000_000.0, slo_ttft_p95_s=2.0)
    assert request.arrival_rate_rps == 1_000_000.0
