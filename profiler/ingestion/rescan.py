"""Finding where a trace file first goes wrong, after a reader has failed on it.

DuckDB and the JSON parser name temporary paths or the wrong line; these scans re-read the
file's bytes (streaming, and only after a failure) for the first byte that is not UTF-8, the
first over-long line, the first value that is not a JSON object and the first CSV row whose
field count differs from the header's. `profiler.ingestion.diagnose` turns what they find into one
line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from profiler.ingestion.sniff import SNIFF_BYTES, Container
from profiler.ingestion.sources import COPY_CHUNK, one_line, size_text

JSON_SCAN_MAX_BYTES = 64 << 20
DIAGNOSE_ROWS = 25_000  # a little over DuckDB's sniffing sample (20,480 rows)
CSV_SEPARATORS = (",", "\t", ";", "|")


def first_invalid_utf8_line(path: str) -> tuple[int, int] | None:
    """Return (1-based line, byte offset) of the first byte that is not UTF-8, if any."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(COPY_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                bad = exc.start
                return line + chunk[:bad].count(b"\n"), offset + bad
            line += chunk.count(b"\n")
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return line, offset
    return None


def first_long_line(path: str, limit: int) -> int | None:
    """The 1-based number of the first line longer than `limit` bytes, if any (streaming)."""
    line, length = 1, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(COPY_CHUNK):
            start = 0
            while (nl := chunk.find(b"\n", start)) != -1:
                if length + nl - start > limit:
                    return line
                line, length, start = line + 1, 0, nl + 1
            length += len(chunk) - start
            if length > limit:
                return line
    return None


@dataclass(frozen=True)
class JsonProblem:
    """Where a JSON/JSONL file first goes wrong: data row (object number), line, and what."""

    row: int
    line: int | None
    reason: str


def first_json_problem(
    path: str, container: Container, max_line_bytes: int, max_rows: int | None = None
) -> JsonProblem | None:
    """The first value of a JSONL file or JSON array that is not a well-formed JSON object.

    Used only after a reader has failed, to name the row. Lines (JSONL) are read at most
    `max_line_bytes` at a time, and only the first `max_rows` when given; an array is parsed
    only when it is under `JSON_SCAN_MAX_BYTES`.
    """
    if container == "jsonl":
        return _jsonl_problem(path, max_line_bytes, max_rows)
    if container == "json_array" and os.path.getsize(path) <= JSON_SCAN_MAX_BYTES:
        return _json_array_problem(path)
    return None


def json_error_reason(exc: Exception, text: str = "", *, with_line: bool = False) -> str:
    """What is wrong with `text`, from the exception `json.loads` raised on it (one line)."""
    if isinstance(exc, UnicodeDecodeError):
        return "bytes that are not UTF-8"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    if not isinstance(exc, json.JSONDecodeError):
        if "digits" in str(exc):
            return "a JSON number with too many digits"
        return f"not valid JSON ({one_line(exc)})"
    if exc.msg.startswith("Unterminated string") or not text[exc.pos:].strip():
        return "not valid JSON: cut off in the middle of a value (truncated?)"
    where = f"line {exc.lineno}, column {exc.colno}" if with_line else f"column {exc.colno}"
    return f"not valid JSON: {exc.msg}{'' if exc.msg.endswith(' at') else ' at'} {where}"


def _not_object(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return f"{kinds.get(type(value), 'a number')}, not a JSON object"


def _jsonl_problem(path: str, max_line_bytes: int, max_rows: int | None) -> JsonProblem | None:
    row = 0
    with open(path, "rb") as fh:
        for line, raw in enumerate(iter(lambda: fh.readline(max_line_bytes + 1), b""), 1):
            if max_rows is not None and row >= max_rows:
                return None
            if len(raw) > max_line_bytes:
                return JsonProblem(row + 1, line, f"line longer than {size_text(max_line_bytes)}")
            if not raw.strip():
                continue
            row, text = row + 1, ""
            try:
                text = raw.decode("utf-8").strip()
                value = json.loads(text)
            except (ValueError, RecursionError) as exc:
                return JsonProblem(row, line, json_error_reason(exc, text))
            if not isinstance(value, dict):
                return JsonProblem(row, line, _not_object(value))
    return None


def _json_array_problem(path: str) -> JsonProblem | None:
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        return None  # reported by the UTF-8 check with its line
    decoder, end = json.JSONDecoder(), len(text)

    def skip(pos: int) -> int:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        return pos

    pos, row = skip(0), 0
    if pos >= end or text[pos] != "[":
        return JsonProblem(1, None, "the file does not start with a JSON array")
    pos = skip(pos + 1)
    if pos < end and text[pos] == "]":
        return None
    while True:
        row += 1
        if pos >= end:
            return JsonProblem(row, None, "the array is cut short (truncated file?)")
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            return JsonProblem(row, None, json_error_reason(exc, text, with_line=True))
        if not isinstance(value, dict):
            return JsonProblem(row, None, _not_object(value))
        pos = skip(pos)
        if pos >= end:
            return JsonProblem(row, None, "the array is cut short (truncated file?)")
        if text[pos] == "]":
            break
        if text[pos] != ",":
            return JsonProblem(row, None, f"expected ',' or ']' after this element, "
                                          f"found {text[pos]!r}")
        pos = skip(pos + 1)
    if skip(pos + 1) < end:
        return JsonProblem(row + 1, None, "content after the closing ']' of the array")
    return None


@dataclass(frozen=True)
class RaggedRow:
    """A CSV row whose field count differs from the header's."""

    row: int
    line: int
    fields: int
    header_fields: int
    separator: str


def first_ragged_row(path: str, max_rows: int = DIAGNOSE_ROWS) -> RaggedRow | None:
    """The first of the leading `max_rows` CSV rows whose field count differs from the header's.

    The separator is the most frequent of comma, tab, `;` and `|` in the first line (none of
    them: a single column, nothing to check).
    Used only after format detection failed, to tell a broken file from unknown columns.
    """
    import csv
    import itertools

    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        first = fh.readline(SNIFF_BYTES)
        counts = {sep: first.count(sep) for sep in CSV_SEPARATORS}
        separator = max(counts, key=lambda k: counts[k])
        if not counts[separator]:
            return None
        fh.seek(0)
        reader = csv.reader(fh, delimiter=separator, strict=False)
        try:
            header = next(reader, None)
            if header is None:
                return None
            for row, fields in enumerate(itertools.islice(reader, max_rows), 1):
                if fields and len(fields) != len(header):
                    return RaggedRow(row, reader.line_num, len(fields), len(header), separator)
        except csv.Error:
            return None
    return None
