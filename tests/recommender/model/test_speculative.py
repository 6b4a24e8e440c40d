"""Tests for recommender/model/speculative.py: expected tokens per step and the draft's shape."""

from __future__ import annotations

import pytest

from core.errors import UsageError
from engines.config import SpeculativeConfig
from recommender.catalog.lookup import get_model
from recommender.model.speculative import (
    DEFAULT_ACCEPTANCE,
    draft_for,
    expected_tokens,
    speculative_config,
)

LLAMA8 = get_model("llama-3.1-8b")


@pytest.mark.parametrize(("a", "k"), [(0.0, 3), (0.5, 1), (0.7, 4), (0.95, 7), (1.0, 5)])
def test_expected_tokens_is_the_geometric_sum(a, k):
    # P(at least i drafts accepted) = a^i; E = 1 + sum_{i=1..k} a^i.
    assert expected_tokens(a, k) == pytest.approx(sum(a**i for i in range(k + 1)))


def test_every_method_has_a_default_in_0_1():
    assert set(DEFAULT_ACCEPTANCE) == {"ngram", "eagle", "eagle3", "draft_model", "mtp"}
    assert all(0 < a < 1 for a in DEFAULT_ACCEPTANCE.values())


def test_eagle_draft_is_one_layer_plus_lm_head():
    # Llama-3.1-8B: 32 layers, 8.03e9 params, 128256 x 4096 embedding and lm_head (untied).
    d = draft_for(SpeculativeConfig(method="eagle", num_tokens=4, draft_model="x"), LLAMA8)
    head = 128256 * 4096
    layer = (8.03e9 - 2 * head) / 32
    assert d.draft_params == pytest.approx(layer + head, rel=0.01)
    assert d.draft_weights_bytes == pytest.approx(2 * (layer + head), rel=0.01)
    # EAGLE-3 drafts over a 32k vocabulary: a smaller head.
    d3 = draft_for(SpeculativeConfig(method="eagle3", num_tokens=4, draft_model="x"), LLAMA8)
    assert d3.draft_params == pytest.approx(layer + 32000 * 4096, rel=0.01)


def test_draft_model_uses_the_catalog_and_ngram_is_cpu_only():
    spec = SpeculativeConfig(method="draft_model", num_tokens=3, draft_model="Qwen/Qwen3-8B")
    d = draft_for(spec, get_model("Qwen/Qwen3-32B"))
    assert d.draft_weights_bytes == pytest.approx(get_model("Qwen/Qwen3-8B").total_params_b
                                                  * 2e9)
    ng = draft_for(SpeculativeConfig(method="ngram", num_tokens=3), LLAMA8)
    assert ng.draft_weights_bytes == 0 and ng.cpu_s_per_seq > 0


def test_bad_inputs_raise_usage_error():
    with pytest.raises(UsageError):
        speculative_config("eagle", 3)
    with pytest.raises(UsageError):
        speculative_config("ngram", 0)
    with pytest.raises(UsageError):
        draft_for(SpeculativeConfig(method="ngram", num_tokens=3), LLAMA8, acceptance=1.5)
    with pytest.raises(UsageError):
        draft_for(SpeculativeConfig(method="draft_model", num_tokens=3, draft_model="nope/x"),
                  LLAMA8)
