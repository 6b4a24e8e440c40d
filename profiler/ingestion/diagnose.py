"""Turning a failed read into one line that names file, row and column.

DuckDB, the JSON parser and the CSV sniffer fail with multi-line messages that name temporary
paths or the wrong line; these helpers rescan the file (only after a failure) to find the exact
row and say what to do.
"""

from __future__ import annotations

import re

from core.errors import TraceError
from profiler.ingestion.rescan import (
    DIAGNOSE_ROWS,
    JsonProblem,
    first_invalid_utf8_line,
    first_json_problem,
    first_long_line,
    first_ragged_row,
)
from profiler.ingestion.sources import OpenedTrace

SHOW_COLUMNS = 20

def diagnose_structure(opened: OpenedTrace) -> None:
    """When no format fits, a broken file structure is the likelier story: name its row."""
    if opened.container in ("jsonl", "json_array"):
        found = first_json_problem(opened.path, opened.container, JSON_MAX_OBJECT_BYTES,
                                   max_rows=DIAGNOSE_ROWS)
        if found is not None:
            raise json_error(opened, found)
    elif opened.container == "csv":
        ragged = first_ragged_row(opened.path)
        if ragged is not None:
            raise TraceError(
                f"line {ragged.line} has {ragged.fields} fields where the header has "
                f"{ragged.header_fields} (separator {ragged.separator!r})",
                path=opened.source, row=ragged.row,
                hint="every row needs the header's number of fields; quote values that "
                "contain the separator",
            )


def show_columns(columns: list[str]) -> str:
    """Column names for a one-line message: quoted, each clipped, at most SHOW_COLUMNS."""
    shown = [repr(c if len(c) <= 40 else c[:39] + "…") for c in columns[:SHOW_COLUMNS]]
    more = f", … ({len(columns)} columns)" if len(columns) > SHOW_COLUMNS else ""
    return "[" + ", ".join(shown) + more + "]"


_CSV_LINE = re.compile(r"CSV Error on Line:\s*(\d+)")
_LIMIT = re.compile(r"(?:line size of|maximum_object_size\"? of)\s*(\d+)\s*bytes", re.IGNORECASE)
_PREFIX = re.compile(r"^[\w ]*(?:Error|Exception):\s*")
CSV_MAX_LINE_BYTES = 2_000_000  # DuckDB's read_csv max_line_size default
JSON_MAX_OBJECT_BYTES = 16 << 20  # DuckDB's read_json maximum_object_size default
DETAIL_CHARS = 200


def map_duckdb_error(exc: Exception, opened: OpenedTrace) -> TraceError:
    """One line naming file (and row where it can be found) for a DuckDB read error."""
    message = str(exc)
    low = message.lower()
    if "unicode" in low or "utf-8" in low or "utf8" in low:
        return _utf8_error(opened)
    if "maximum_object_size" in message or "line size" in low or "max_line_size" in low:
        m = _LIMIT.search(message)
        default = CSV_MAX_LINE_BYTES if opened.container == "csv" else JSON_MAX_OBJECT_BYTES
        return _long_line_error(opened, int(m.group(1)) if m else default)
    if opened.container in ("jsonl", "json_array"):
        limit = JSON_MAX_OBJECT_BYTES
        found = first_json_problem(opened.path, opened.container, limit)
        if found is not None:
            return json_error(opened, found)
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    detail = _PREFIX.sub("", lines[0]) if lines else type(exc).__name__
    m = _CSV_LINE.search(message)
    if m:  # DuckDB counts file lines from 1, header included; the next lines say what failed
        reason = next((ln for ln in lines[1:] if not ln.startswith("Original Line")), detail)
        line = int(m.group(1))
        return TraceError(
            f"cannot parse csv at line {line}: {_clip(reason, opened)}", path=opened.source,
            row=line - 1 if line > 1 else None,
            hint="check the delimiter, quoting and the number of fields on that line",
        )
    return TraceError(f"cannot read {opened.container}: {_clip(detail, opened)}",
                      path=opened.source)


def _clip(text: str, opened: OpenedTrace) -> str:
    """A third-party message made safe for our one line: no paths, no newlines, bounded."""
    for path in {opened.path, opened.source}:
        text = text.replace(f' in file "{path}"', "").replace(f'"{path}"', "the file")
        text = text.replace(path, "the file")
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def _utf8_error(opened: OpenedTrace) -> TraceError:
    where = first_invalid_utf8_line(opened.path)
    hint = "re-encode the file as UTF-8, e.g. with iconv -t UTF-8"
    if where is None:
        return TraceError("bytes that are not UTF-8", path=opened.source, hint=hint)
    line = where[0]
    row = line - 1 if opened.container == "csv" else line
    return TraceError(f"bytes that are not UTF-8 at line {line}", path=opened.source,
                      row=row if row >= 1 and opened.container != "json_array" else None,
                      hint=hint)


def _long_line_error(opened: OpenedTrace, limit: int) -> TraceError:
    line = first_long_line(opened.path, limit)
    where = f"line {line} is" if line else "a line is"
    row = None if line is None else (line - 1 if opened.container == "csv" else line)
    return TraceError(
        f"{where} longer than {limit:,} bytes, too long to be one request",
        path=opened.source, row=row if row and opened.container != "json_array" else None,
        hint="each request must be one line of at most a few MB; drop or trim that row",
    )


def json_error(opened: OpenedTrace, found: JsonProblem) -> TraceError:
    where = f" (line {found.line})" if found.line and found.line != found.row else ""
    return TraceError(
        f"{found.reason}{where}", path=opened.source, row=found.row,
        hint="each row must be one JSON object" + (" per line" if found.line else ""),
    )
