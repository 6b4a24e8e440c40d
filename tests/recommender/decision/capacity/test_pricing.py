"""Tests for recommender/decision/capacity/pricing.py: $/Mtok from a GPU-hour price at today's
load, at the SLO boundary and in the growth table, the user's price over the catalog's, and no
figure without a price."""

from __future__ import annotations

import pytest

from recommender.catalog.lookup import get_gpu, load_gpus
from recommender.catalog.specs import GpuPrice
from recommender.decision.capacity.pricing import USER_PRICE_SOURCE, price_of, usd_per_mtok
from recommender.decision.recommendation import RecommendRequest

PRICE = GpuPrice(usd_per_hour=3.6, read_on="2026-09-25", source="a page")


def test_usd_per_mtok_is_gpu_hours_over_output_tokens():
    # 2 GPUs at $3.60/h = $7.20/h; 1,000 tok/s = 3.6 Mtok/h: $2 per Mtok
    assert usd_per_mtok(2, PRICE, 1000.0) == pytest.approx(2.0)
    assert usd_per_mtok(2, None, 1000.0) is None
    assert usd_per_mtok(2, PRICE, 0.0) is None


def test_the_users_price_wins_over_the_catalogs_and_each_catalog_price_has_its_source():
    h100 = get_gpu("H100-SXM")
    request = RecommendRequest(source="t.csv", gpu="H100-SXM", model="m")
    assert price_of(request, h100) == h100.price is not None
    own = price_of(request.model_copy(update={"gpu_price_per_hour_usd": 2.0}), h100)
    assert own == GpuPrice(usd_per_hour=2.0, source=USER_PRICE_SOURCE)
    for gpu in load_gpus().values():
        if gpu.price is not None:
            assert gpu.price.read_on and gpu.price.source and gpu.price.usd_per_hour > 0
    assert price_of(request, get_gpu("L4")) is None  # none found with a source
