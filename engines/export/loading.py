"""Reading `rec.json` into an ExportRequest, whichever of its three shapes the file holds: an
ExportRequest object, a bare EngineConfig, or a saved Recommendation (its "export" key).
Errors name the file and the field. `export_file` goes on to export the bundle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from engines.errors import ExportError
from engines.export.bundle import export_bundle
from engines.export.request import ExportRequest


def load_request(path: str | os.PathLike[str]) -> ExportRequest:
    """Read `rec.json`: an ExportRequest object, a bare EngineConfig, or a saved
    Recommendation (its "export" key holds the ExportRequest).

    Raises:
        ExportError: unreadable file, bad JSON, or an invalid field (path and field named).
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
    if not isinstance(data, dict):
        raise ExportError(f"{path}: expected a JSON object (EngineConfig or {{\"config\": …}})")
    # A saved Recommendation carries its ExportRequest under "export" (error paths say so).
    prefix = "export." if "export" in data else ""
    data = data["export"] if prefix else data
    if not isinstance(data, dict):
        raise ExportError(f"{path}: export: expected a JSON object")
    try:
        return ExportRequest.model_validate(data if "config" in data else {"config": data})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ExportError(f"{path}: {prefix}{where}: {first['msg']}") from None


def export_file(
    request_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """`load_request` then `export_bundle`; returns the paths written (see there)."""
    return export_bundle(load_request(request_path), out_dir)
