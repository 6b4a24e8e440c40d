"""Staging text-format traces: chat/ShareGPT-style JSON objects whose lengths are measured.

Table formats are staged by one DuckDB SELECT; text formats cannot be, because each object's
token counts come from a tokenizer (or an estimate) in Python. This module detects such a
format, reads the objects in batches, turns each into zero or more requests and appends them
to the TEMP `stage` table, numbering them in file order. Where the format lists an object's
messages, the same pass replays prompt lookup over its outputs
(`profiler.analysis.ngram_acceptance`),
keeping counters only; the rate lands in `FormatInfo.ngram_acceptance`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from core.errors import TraceError, UsageError
from profiler.analysis.ngram_acceptance import NgramEstimator
from profiler.formats.base import TextFormat
from profiler.formats.registry import TEXT_FORMATS
from profiler.ingestion.diagnose import DETAIL_CHARS
from profiler.ingestion.rescan import json_error_reason
from profiler.ingestion.sources import OpenedTrace
from profiler.ingestion.textblocks import TextMeasurer
from profiler.schema import FormatInfo

if TYPE_CHECKING:
    from profiler.ingestion.options import IngestOptions

TEXT_BATCH = 2_000
STAGE_DDL = """
CREATE OR REPLACE TEMP TABLE stage (
    src_row BIGINT, t_raw DOUBLE, in_v DOUBLE, out_v DOUBLE, session_id VARCHAR,
    model VARCHAR, block_hashes UBIGINT[], block_size INTEGER, status VARCHAR,
    tokens_estimated BOOLEAN)
"""


def text_format(con: Any, opened: OpenedTrace, options: IngestOptions) -> TextFormat | None:
    """The text format of the file: forced by --format, else matched on its first object.

    Raises:
        UsageError: a text format is forced on a file that is not JSON or JSONL.
    """
    if options.format is not None:
        text = TEXT_FORMATS.get(options.format)
        if text is not None and opened.container not in ("jsonl", "json_array"):
            raise UsageError(f"{opened.source}: --format {options.format} needs a JSON or JSONL "
                             f"file, not {opened.container}")
        return text
    if opened.container not in ("jsonl", "json_array") or options.column_map:
        return None
    first = _first_object(con, opened)
    if first is None:
        return None
    return next((f for f in TEXT_FORMATS.values() if f.match(first)), None)


def _first_object(con: Any, opened: OpenedTrace) -> dict[str, Any] | None:
    fmt = "array" if opened.container == "json_array" else "newline_delimited"
    row = con.execute(
        "SELECT json FROM read_json_objects(?, format = ?) LIMIT 1", [opened.path, fmt]
    ).fetchone()
    if row is None:
        raise TraceError("no data rows (the JSON holds no objects)", path=opened.source)
    try:
        obj = json.loads(row[0])
    except (ValueError, RecursionError) as exc:
        raise TraceError(json_error_reason(exc, row[0]), path=opened.source, row=1) from None
    return obj if isinstance(obj, dict) else None


def _objects(con: Any, opened: OpenedTrace) -> Iterator[list[str]]:
    fmt = "array" if opened.container == "json_array" else "newline_delimited"
    cur = con.cursor()
    try:
        cur.execute("SELECT json FROM read_json_objects(?, format = ?)", [opened.path, fmt])
        while batch := cur.fetchmany(TEXT_BATCH):
            yield [r[0] for r in batch]
    finally:
        cur.close()


def stage_text(
    con: Any, opened: OpenedTrace, fmt: TextFormat, options: IngestOptions
) -> tuple[FormatInfo, list[str]]:
    """Create the TEMP `stage` table and fill it with the requests of every object.

    Raises:
        TraceError: an object is not valid JSON or not a valid `fmt` object (file and row named).
    """
    import pyarrow as pa

    con.execute(STAGE_DDL)
    measurer = TextMeasurer(options.tokenizer_dir)
    measurer.load()
    estimator = NgramEstimator(measurer.token_ids,
                               "words" if measurer.estimated else "tokenizer")
    row, src = 0, 0
    any_time = any_estimated = False
    for batch in _objects(con, opened):
        records = []
        for text in batch:
            row += 1
            obj = _parse(text, opened, row)
            for req in _text_requests(fmt, obj, measurer, opened, row):
                src += 1
                any_time = any_time or req.t_raw is not None
                any_estimated = any_estimated or req.tokens_estimated
                records.append({"src_row": src, **_raw_dict(req, measurer)})
            if fmt.messages is not None:
                estimator.observe(fmt.messages(obj))
        if records:
            table = pa.Table.from_pylist(records, schema=_STAGE_ARROW())
            con.register("stage_batch", table)
            con.execute("INSERT INTO stage SELECT * FROM stage_batch")
            con.unregister("stage_batch")
    info = FormatInfo(
        kind=fmt.kind,
        label=fmt.label,
        explanation=f"{fmt.label}: JSON objects with text ({opened.container}"
        + (f", {opened.compression}" if opened.compression else "") + ")",
        columns=fmt.columns,
        timestamp_rule=fmt.time_reason,
        arrivals="trace" if any_time else "undefined",
        block_size=measurer.block_size,
        tokens_estimated=any_estimated,
        source=opened.source,
        ngram_acceptance=estimator.result(),
    )
    warnings = []
    if any_estimated:
        warnings.append(
            "token counts estimated from text (ceil(chars/4)) where usage was absent; "
            "pass --tokenizer DIR for exact counts"
        )
    return info, warnings


def _parse(text: str, opened: OpenedTrace, row: int) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TraceError(json_error_reason(exc, text), path=opened.source, row=row) from None


def _text_requests(
    fmt: TextFormat, obj: Any, measurer: TextMeasurer, opened: OpenedTrace, row: int
) -> list[Any]:
    try:
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        return fmt.to_requests(obj, measurer)
    except TraceError as exc:
        raise TraceError(" ".join(str(exc).split()), path=opened.source, row=row) from None
    except (ValueError, TypeError, AttributeError, KeyError, ArithmeticError,
            RecursionError) as exc:
        detail = " ".join(str(exc).split())[:DETAIL_CHARS] or type(exc).__name__
        raise TraceError(f"malformed {fmt.kind} object: {detail}", path=opened.source,
                         row=row) from None


def _raw_dict(req: Any, measurer: TextMeasurer) -> dict[str, Any]:
    return {
        "t_raw": req.t_raw,
        "in_v": _as_float(req.input_tokens),
        "out_v": _as_float(req.output_tokens),
        "session_id": req.session_id,
        "model": req.model,
        "block_hashes": req.block_hashes or None,
        "block_size": measurer.block_size if req.block_hashes else None,
        "status": req.status,
        "tokens_estimated": req.tokens_estimated,
    }


def _as_float(value: Any) -> float | None:
    try:
        return None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _STAGE_ARROW() -> Any:
    import pyarrow as pa

    # Same columns, same order as STAGE_DDL: batches are appended with INSERT … SELECT *.
    return pa.schema([
        ("src_row", pa.int64()), ("t_raw", pa.float64()), ("in_v", pa.float64()),
        ("out_v", pa.float64()), ("session_id", pa.string()), ("model", pa.string()),
        ("block_hashes", pa.list_(pa.uint64())), ("block_size", pa.int32()),
        ("status", pa.string()), ("tokens_estimated", pa.bool_()),
    ])
