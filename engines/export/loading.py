"""Reading `rec.json` into an ExportRequest, whichever of its three shapes the file holds: an
ExportRequest object, a bare EngineConfig, or a saved Recommendation (its `candidates`).
Errors name the file and the field. `export_file` goes on to export the bundle.

A saved Recommendation is the recommender's record, which `engines/` does not know: the
caller passes the reader that builds its pick's ExportRequest
(`recommender.decision.export_view.saved_export`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.errors import UsageError
from engines.errors import ExportError
from engines.export.bundle import export_bundle
from engines.export.request import ExportRequest

# Builds the export request of a saved Recommendation's pick from its JSON object.
RecommendationReader = Callable[[dict[str, Any]], ExportRequest]


def load_request(path: str | os.PathLike[str], *,
                 recommendation: RecommendationReader | None = None) -> ExportRequest:
    """Read `rec.json`: an ExportRequest object, a bare EngineConfig, or a saved
    Recommendation (an object with `candidates`, or `export` as saved before the pick became
    an index; read by `recommendation`).

    Raises:
        ExportError: unreadable file, bad JSON, an invalid field (path and field named), or a
            saved Recommendation and no `recommendation` reader.
        UsageError: `recommendation` refuses the file (e.g. a Recommendation of an older
            shape), the path leading the reader's line.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExportError(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                          ) from None
    except RecursionError:  # `[[[[…` a hundred thousand deep: no record is that deep
        raise ExportError(f"{path}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path}: expected a JSON object (EngineConfig or {{\"config\": …}})")
    saved = "candidates" in data or "export" in data
    if saved and recommendation is None:
        raise ExportError(f"{path}: a saved Recommendation: give it to `python -m app export` "
                          "or `python -m app bench`, which read its pick")
    try:
        if recommendation is not None and saved:
            return recommendation(data)
        return ExportRequest.model_validate(data if "config" in data else {"config": data})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ExportError(f"{path}: {where}: {first['msg']}") from None
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def export_file(
    request_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
    recommendation: RecommendationReader | None = None,
) -> list[Path]:
    """`load_request` then `export_bundle`; returns the paths written (see there)."""
    return export_bundle(load_request(request_path, recommendation=recommendation), out_dir)
