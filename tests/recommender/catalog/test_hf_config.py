"""Tests for recommender/catalog/hf_config.py: a config.json nested a hundred thousand deep
is a CatalogError line, not a RecursionError traceback."""

from __future__ import annotations

import pytest

from core.errors import CatalogError
from recommender.catalog.lookup import get_model


def test_deeply_nested_config_json_is_a_catalog_error(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    with pytest.raises(CatalogError, match="nested too deeply"):
        get_model(str(path))
