"""Tests for engines/export/loading.py: a rec.json nested a hundred thousand deep is one
error line, not a RecursionError traceback."""

from __future__ import annotations

import pytest

from engines.errors import ExportError
from engines.export.loading import load_request


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"config":' * 50_000 + "1" + "}" * 50_000])
def test_deeply_nested_json_is_an_export_error(tmp_path, text: str) -> None:
    path = tmp_path / "rec.json"
    path.write_text(text)
    with pytest.raises(ExportError, match="nested too deeply"):
        load_request(path)
