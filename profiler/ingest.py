"""Reading a trace of any supported format into the canonical `requests` table.

Flow: open (decompress, sniff) -> detect the format -> stage rows in a TEMP table (typed with
TRY_CAST, each row numbered as in the source) -> validate, naming file, row and column of the
first bad value -> time rule -> write `requests` sorted by arrival, in one transaction. Nothing
persistent is written before validation passes.
"""

# ruff: noqa: S608 - SQL here is composed only of constants and column names passed through
# quote_ident; every value (paths, rows, scales) is a bound parameter.

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from profiler.errors import FormatDetectionError, TraceError, UsageError
from profiler.formats import TABLE_FORMATS, TEXT_FORMATS, FieldMap, TableFormat, TextFormat
from profiler.formats.base import FIELDS, quote_ident
from profiler.formats.generic import resolve as resolve_generic
from profiler.ingest_errors import (
    DETAIL_CHARS,
    diagnose_structure,
    map_duckdb_error,
    show_columns,
)
from profiler.schema import REQUEST_COLUMNS, REQUESTS_TABLE, FormatInfo, Record
from profiler.sources import OpenedTrace, json_error_reason, open_trace
from profiler.textblocks import TextMeasurer
from profiler.timestamps import TimeSpec, TimeUnit, detect_numeric, epoch_class
from profiler.workspace import Workspace

TEXT_BATCH = 2_000
INT32_MAX = 2**31 - 1
STAGE_DDL = """
CREATE OR REPLACE TEMP TABLE stage (
    src_row BIGINT, t_raw DOUBLE, in_v DOUBLE, out_v DOUBLE, session_id VARCHAR,
    model VARCHAR, block_hashes UBIGINT[], block_size INTEGER, status VARCHAR,
    tokens_estimated BOOLEAN)
"""
META_DDL = """CREATE OR REPLACE TABLE trace_meta (
    format_json VARCHAR, warnings_json VARCHAR, n_requests BIGINT, fingerprint VARCHAR)"""
# Bump when ingestion changes what it writes, so cached workspaces are re-ingested.
INGEST_VERSION = 2


class IngestOptions(Record):
    """How to read a trace; every field is optional and has a stated default."""

    format: str | None = Field(None, description="force a format kind instead of detecting")
    column_map: dict[str, str] = Field(default_factory=dict, description="field -> column")
    time_unit: TimeUnit | None = Field(None, description="override the timestamp rule")
    tokenizer_dir: str | None = Field(None, description="local HF tokenizer folder")
    synthesize_arrivals_rps: float | None = Field(
        None, gt=0, description="Poisson arrivals at this rate when the trace has no times"
    )
    seed: int = 0
    max_decompressed_bytes: int | None = Field(None, gt=0)


@dataclass
class IngestResult:
    """What was read: the detected format, the row count and warnings for the user."""

    format: FormatInfo
    n_requests: int
    warnings: list[str] = field(default_factory=list)


def ingest(path: str, workspace: Workspace, options: IngestOptions | None = None) -> IngestResult:
    """Read `path` into the workspace's `requests` table, replacing what was there.

    Raises:
        TraceError: the file cannot be read or holds invalid requests (nothing is written).
        UsageError: an option is invalid (unknown format kind, map field or column).
    """
    options = options or IngestOptions()
    _check_options(options)
    import duckdb

    fingerprint = _fingerprint(path, options)
    cached = _cached(workspace, fingerprint)
    if cached is not None:
        return cached
    with (
        open_trace(path, max_decompressed_bytes=options.max_decompressed_bytes) as opened,
        workspace.connect() as con,
    ):
        try:
            return _ingest(con, opened, options, fingerprint)
        except duckdb.Error as exc:
            raise map_duckdb_error(exc, opened) from None


def _fingerprint(path: str, options: IngestOptions) -> str | None:
    """Identity of (file version, options): same file, same mtime and size, same options."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # open_trace reports the missing file
    key = [os.path.abspath(path), st.st_size, st.st_mtime_ns, options.model_dump(mode="json"),
           INGEST_VERSION]
    if options.tokenizer_dir:  # a changed tokenizer changes every count
        with contextlib.suppress(OSError):
            tok = os.stat(os.path.join(options.tokenizer_dir, "tokenizer.json"))
            key += [tok.st_size, tok.st_mtime_ns]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


def _cached(workspace: Workspace, fingerprint: str | None) -> IngestResult | None:
    """The workspace's trace when it is this very file read with these options, else None."""
    import duckdb

    if fingerprint is None or not workspace.exists():
        return None
    try:
        with workspace.connect(read_only=True) as con:
            row = con.execute("SELECT format_json, warnings_json, n_requests FROM trace_meta "
                              "WHERE fingerprint = ?", [fingerprint]).fetchall()
    except duckdb.Error:  # an older workspace layout, or one without a trace: ingest anew
        return None
    if not row:
        return None
    info, warnings, n = row[0]
    return IngestResult(FormatInfo.model_validate_json(info), int(n), json.loads(warnings))


def _check_options(options: IngestOptions) -> None:
    kinds = (*TABLE_FORMATS, *TEXT_FORMATS)
    if options.format is not None and options.format not in kinds:
        raise UsageError(f"--format must be one of {', '.join(kinds)}, not {options.format!r}")
    unknown = sorted(set(options.column_map) - set(FIELDS))
    if unknown:
        raise UsageError(
            f"--map field {unknown[0]!r} is unknown; fields are {', '.join(FIELDS)}"
        )


def _ingest(
    con: Any, opened: OpenedTrace, options: IngestOptions, fingerprint: str | None
) -> IngestResult:
    text_format = _text_format(con, opened, options)
    if text_format is not None:
        con.execute(STAGE_DDL)
        info, warnings = _stage_text(con, opened, text_format, options)
    else:
        info, warnings = _stage_table(con, opened, options)
    n = _validate(con, opened, info)
    info = _block_size(con, info)
    spec = _time_spec(con, opened, info, options)
    backwards = _backwards(con) if spec is not None else 0
    if backwards:
        warnings.append(f"{backwards} rows arrive earlier than the row before them: "
                        "sorted by arrival time")
    if spec is None and options.synthesize_arrivals_rps:
        spec, note = _synthesize_arrivals(con, options)
        info = info.model_copy(update={"arrivals": "synthesized", "timestamp_rule": note})
        warnings.append(note)
    elif spec is None:
        warnings.append(
            "the trace has no timestamps: arrival-time figures are undefined "
            "(use --synthesize-arrivals RATE for Poisson arrivals)"
        )
    else:
        info = info.model_copy(update={"timestamp_rule": spec.reason})
        if options.synthesize_arrivals_rps:
            warnings.append("--synthesize-arrivals ignored: the trace has timestamps")
    _write(con, info, spec, warnings, needs_sort=backwards > 0,
           meta=(n, fingerprint))
    return IngestResult(format=info, n_requests=n, warnings=warnings)


# --- detection -------------------------------------------------------------------------------


def _scan_sql(opened: OpenedTrace) -> str:
    """The DuckDB table function reading the file (its path is the one `?` parameter)."""
    return {
        "parquet": "read_parquet(?)",
        "csv": "read_csv(?, header = true)",
        "jsonl": "read_json(?, format = 'newline_delimited')",
        "json_array": "read_json(?, format = 'array')",
    }[opened.container]


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


def _text_format(con: Any, opened: OpenedTrace, options: IngestOptions) -> TextFormat | None:
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


def _columns(con: Any, opened: OpenedTrace) -> list[tuple[str, str]]:
    rows = con.execute(f"DESCRIBE SELECT * FROM {_scan_sql(opened)}", [opened.path]).fetchall()
    if not rows:
        raise TraceError("no columns", path=opened.source)
    return [(r[0], r[1]) for r in rows]


def _detect_table(
    columns: list[str], opened: OpenedTrace, options: IngestOptions
) -> tuple[TableFormat, FieldMap]:
    if options.format is not None:
        fmt = TABLE_FORMATS[options.format]
        fm = resolve_generic(columns, options.column_map) if fmt.kind == "generic" else None
        fm = fm or fmt.match(columns)
        if fm is None:
            raise FormatDetectionError(
                f"columns {show_columns(columns)} do not fit format {fmt.kind}", path=opened.source
            )
        return fmt, _apply_map(fm, options.column_map)
    if options.column_map:
        fm = resolve_generic(columns, options.column_map)
        if fm is not None:
            return TABLE_FORMATS["generic"], fm
    for fmt in TABLE_FORMATS.values():
        fm = fmt.match(columns)
        if fm is not None:
            return fmt, fm
    raise FormatDetectionError(
        f"unknown columns {show_columns(columns)}: no known trace format matches",
        path=opened.source,
        hint="name them with --map input=COL --map output=COL [--map time=COL …]",
    )


def _apply_map(fm: FieldMap, column_map: dict[str, str]) -> FieldMap:
    merged = {k: getattr(fm, k) for k in FIELDS} | column_map
    return FieldMap(**merged)


# --- staging ---------------------------------------------------------------------------------


def _stage_table(
    con: Any, opened: OpenedTrace, options: IngestOptions
) -> tuple[FormatInfo, list[str]]:
    typed = _columns(con, opened)
    names = [c for c, _ in typed]
    try:
        fmt, fm = _detect_table(names, opened, options)
    except FormatDetectionError:
        diagnose_structure(opened)
        raise
    missing = [c for c in fm.used().values() if c not in names]
    if missing:
        raise UsageError(
            f"{opened.source}: no column {missing[0]!r}; columns are {show_columns(names)}")
    types = dict(typed)
    time_is_datetime = _is_datetime(con, opened, fm.time, types=types, fmt=fmt, options=options)
    con.execute(_stage_select(opened, fmt, fm, time_is_datetime), [opened.path])
    info = FormatInfo(
        kind=fmt.kind,
        label=fmt.label,
        explanation=fmt.explain(fm) + f" ({opened.container}"
        + (f", {opened.compression}" if opened.compression else "") + ")",
        columns=fm.used(),
        timestamp_rule="datetime" if time_is_datetime else "",
        arrivals="trace" if fm.time else "undefined",
        block_size=fmt.block_size if fm.hashes else None,
        tokens_estimated=False,
        source=opened.source,
    )
    return info, []


def _is_datetime(
    con: Any, opened: OpenedTrace, column: str | None, *, types: dict[str, str],
    fmt: TableFormat, options: IngestOptions,
) -> bool:
    unit = options.time_unit or fmt.time_unit
    if column is None:
        return False
    if unit is not None:
        return unit == "datetime"
    kind = types[column].upper()
    if kind.startswith(("TIMESTAMP", "DATE")):
        return True
    if kind != "VARCHAR":
        return False
    col = quote_ident(column)
    row = con.execute(
        f"SELECT TRY_CAST({col} AS DOUBLE) IS NULL AND TRY_CAST({col} AS TIMESTAMPTZ) "
        f"IS NOT NULL FROM {_scan_sql(opened)} WHERE {col} IS NOT NULL LIMIT 1",
        [opened.path],
    ).fetchone()
    return bool(row and row[0])


def _stage_select(opened: OpenedTrace, fmt: TableFormat, fm: FieldMap, dt: bool) -> str:
    """CREATE the TEMP stage with the four core columns and only the optional ones mapped.

    Absent optional columns are added at write time as metadata-only columns, which is several
    times cheaper in DuckDB than carrying NULLs through every row.
    """
    def col(name: str, cast: str) -> str:
        return f"TRY_CAST({quote_ident(name)} AS {cast})"

    if fm.time is None:
        time_sql = "NULL::DOUBLE"
    elif dt:
        time_sql = f"epoch_us(TRY_CAST({quote_ident(fm.time)} AS TIMESTAMPTZ))::DOUBLE"
    else:
        time_sql = col(fm.time, "DOUBLE")
    optional = {
        "session_id": col(fm.session, "VARCHAR") if fm.session else None,
        "model": col(fm.model, "VARCHAR") if fm.model else None,
        "block_hashes": col(fm.hashes, "UBIGINT[]") if fm.hashes else None,
        "block_size": col(fm.block_size, "INTEGER") if fm.block_size else (
            f"{int(fmt.block_size)}::INTEGER" if fmt.block_size and fm.hashes else None),
        "status": fmt.status_sql(fm) or (col(fm.status, "VARCHAR") if fm.status else None),
    }
    extra = "".join(f", {sql} AS {name}" for name, sql in optional.items() if sql)
    return f"""
        CREATE OR REPLACE TEMP TABLE stage AS
        SELECT row_number() OVER () AS src_row, {time_sql} AS t_raw,
               {col(fm.input, "DOUBLE")} AS in_v, {col(fm.output, "DOUBLE")} AS out_v{extra}
        FROM {_scan_sql(opened)}
    """


def _objects(con: Any, opened: OpenedTrace) -> Iterator[list[str]]:
    fmt = "array" if opened.container == "json_array" else "newline_delimited"
    cur = con.cursor()
    try:
        cur.execute("SELECT json FROM read_json_objects(?, format = ?)", [opened.path, fmt])
        while batch := cur.fetchmany(TEXT_BATCH):
            yield [r[0] for r in batch]
    finally:
        cur.close()


def _stage_text(
    con: Any, opened: OpenedTrace, fmt: TextFormat, options: IngestOptions
) -> tuple[FormatInfo, list[str]]:
    import pyarrow as pa

    measurer = TextMeasurer(options.tokenizer_dir)
    measurer.load()
    row, src = 0, 0
    any_time = any_estimated = False
    for batch in _objects(con, opened):
        records = []
        for text in batch:
            row += 1
            for req in _text_requests(fmt, text, measurer, opened, row):
                src += 1
                any_time = any_time or req.t_raw is not None
                any_estimated = any_estimated or req.tokens_estimated
                records.append({"src_row": src, **_raw_dict(req, measurer)})
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
    )
    warnings = []
    if any_estimated:
        warnings.append(
            "token counts estimated from text (ceil(chars/4)) where usage was absent; "
            "pass --tokenizer DIR for exact counts"
        )
    return info, warnings


def _text_requests(
    fmt: TextFormat, text: str, measurer: TextMeasurer, opened: OpenedTrace, row: int
) -> list[Any]:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TraceError(json_error_reason(exc, text), path=opened.source, row=row) from None
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

    return pa.schema([
        ("src_row", pa.int64()), ("t_raw", pa.float64()), ("in_v", pa.float64()),
        ("out_v", pa.float64()), ("session_id", pa.string()), ("model", pa.string()),
        ("block_hashes", pa.list_(pa.uint64())), ("block_size", pa.int32()),
        ("status", pa.string()), ("tokens_estimated", pa.bool_()),
    ])


# --- validation and time ---------------------------------------------------------------------

_BAD_COUNT = "({v} IS NULL OR isnan({v}) OR {v} < 0 OR {v} <> floor({v}) OR {v} > {m})"


def _validate(con: Any, opened: OpenedTrace, info: FormatInfo) -> int:
    timed = info.arrivals == "trace"
    bad_t = "t_raw IS NULL OR isnan(t_raw) OR isinf(t_raw)" if timed else "false"
    n, bad_time, bad_in, bad_out = con.execute(
        f"""SELECT count(*),
               min(src_row) FILTER (WHERE {bad_t}),
               min(src_row) FILTER (WHERE {_BAD_COUNT.format(v="in_v", m=INT32_MAX)}),
               min(src_row) FILTER (WHERE {_BAD_COUNT.format(v="out_v", m=INT32_MAX)})
            FROM stage"""
    ).fetchone()
    if n == 0:
        what = (f"no requests: no {info.kind} object holds a request" if info.kind in TEXT_FORMATS
                else "no data rows (header only?)")
        raise TraceError(what, path=opened.source, hint="the file must hold at least one request")
    problems = [(r, f) for r, f in ((bad_time, "time"), (bad_in, "input"), (bad_out, "output"))
                if r is not None]
    if problems:
        row, fld = min(problems)
        column = info.columns.get(fld, fld)
        raw = _raw_value(con, opened, info, fld, row)
        what = "a valid timestamp" if fld == "time" else "a whole, non-negative token count"
        raise TraceError(f"{raw} is not {what}", path=opened.source, row=row, column=column,
                         hint="fix or drop that row")
    return int(n)


def _raw_value(con: Any, opened: OpenedTrace, info: FormatInfo, fld: str, row: int) -> str:
    column = info.columns.get(fld, fld)
    if info.kind in TEXT_FORMATS:  # the text is gone; the staged number is what was read
        staged = {"time": "t_raw", "input": "in_v", "output": "out_v"}[fld]
        (value,) = con.execute(f"SELECT {staged} FROM stage WHERE src_row = ?", [row]).fetchone()
        return "a missing or non-numeric value" if value is None else f"{value:.10g}"
    value = con.execute(
        f"SELECT {quote_ident(column)}::VARCHAR FROM (SELECT row_number() OVER () AS rn, "
        f"{quote_ident(column)} FROM {_scan_sql(opened)}) WHERE rn = ?",
        [opened.path, row],
    ).fetchone()
    if value is None or value[0] is None:
        return "an empty value"
    return repr(value[0][:60])


def _time_spec(
    con: Any, opened: OpenedTrace, info: FormatInfo, options: IngestOptions
) -> TimeSpec | None:
    if info.arrivals != "trace":
        return None
    fmt = TABLE_FORMATS.get(info.kind) or TEXT_FORMATS[info.kind]
    if options.time_unit is not None:
        spec = TimeSpec(options.time_unit, f"--time-unit {options.time_unit} (user override)")
    elif info.timestamp_rule == "datetime":
        spec = TimeSpec("datetime", "datetimes (naive ones read as UTC)")
    elif fmt.time_unit is not None:
        spec = TimeSpec(fmt.time_unit, fmt.time_reason)
    else:
        (median,) = con.execute("SELECT median(t_raw) FROM stage").fetchone()
        spec = detect_numeric(info.columns.get("time", "time"), float(median))
        if spec.epoch:
            _check_mixed_units(con, opened, info, spec)
    return spec


def _check_mixed_units(con: Any, opened: OpenedTrace, info: FormatInfo, spec: TimeSpec) -> None:
    rows = con.execute("SELECT src_row, t_raw FROM stage WHERE abs(t_raw) < ? "
                       "OR abs(t_raw) >= ? ORDER BY src_row LIMIT 1",
                       list(_class_bounds(spec.unit))).fetchone()
    if rows is not None:
        other = epoch_class(rows[1])
        looks = f"epoch {other}" if other else "relative time"
        raise TraceError(
            f"mixed time units: {rows[1]:.6g} looks like {looks} where the column is epoch "
            f"{spec.unit}",
            path=opened.source, row=int(rows[0]), column=info.columns.get("time"),
            hint="convert the column to one unit, or pass --time-unit",
        )


def _class_bounds(unit: str) -> tuple[float, float]:
    bounds = {"s": (1e9, 1e11), "ms": (1e11, 1e14), "us": (1e14, 1e17), "ns": (1e17, 1e300)}
    return bounds[unit]


def _backwards(con: Any) -> int:
    """Rows that arrive before their predecessor in file order.

    `stage` was filled in src_row order and DuckDB preserves insertion order, so a streaming
    lag over () compares file neighbours without sorting.
    """
    (back,) = con.execute(
        "SELECT count(*) FROM (SELECT t_raw < lag(t_raw) OVER () AS b FROM stage) WHERE b"
    ).fetchone()
    return int(back)


def _block_size(con: Any, info: FormatInfo) -> FormatInfo:
    """The trace's block size when rows carry one (ServeFit tables) and all agree."""
    if info.block_size is not None or not {"block_size", "hashes"} <= set(info.columns):
        return info
    lo, hi = con.execute("SELECT min(block_size), max(block_size) FROM stage "
                         "WHERE block_hashes IS NOT NULL").fetchone()
    return info.model_copy(update={"block_size": lo}) if lo is not None and lo == hi else info


def _synthesize_arrivals(con: Any, options: IngestOptions) -> tuple[TimeSpec, str]:
    """Poisson arrivals in file order, in SQL: exponential gaps from a seeded hash of the row.

    u = top 53 bits of hash(src_row, seed) / 2^53 is uniform in [0, 1); gap = -ln(1 - u) / rate.
    Deterministic for a seed, and no Python per row however long the trace.
    """
    rate = float(options.synthesize_arrivals_rps or 0)
    con.execute(
        """UPDATE stage SET t_raw = a.t FROM (
               SELECT src_row, coalesce(sum(g) OVER (ORDER BY src_row ROWS BETWEEN
                      UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS t
               FROM (SELECT src_row,
                            -ln(1.0 - (hash(src_row, ?::BIGINT) >> 11)::DOUBLE
                                / 9007199254740992.0) / ? AS g
                     FROM stage)
           ) a WHERE stage.src_row = a.src_row""",
        [options.seed, rate],
    )
    note = f"arrivals synthesized: Poisson at {rate:g} req/s (seed {options.seed}), in file order"
    return TimeSpec("s", note), note


# --- write -----------------------------------------------------------------------------------


def _write(
    con: Any, info: FormatInfo, spec: TimeSpec | None, warnings: list[str], *, needs_sort: bool,
    meta: tuple[int, str | None],
) -> None:
    """Replace `requests` and `trace_meta` in one transaction.

    Rows already in arrival order (the usual case) keep their file order, which saves a sort
    of the whole trace; otherwise they are sorted by (arrival, file row).
    """
    scale = spec.seconds_per_unit if spec else 0.0
    arrival = "(t_raw - (SELECT min(t_raw) FROM stage)) * ?" if spec else "NULL::DOUBLE"
    params = [scale] if spec else []
    if needs_sort:
        request_id = "row_number() OVER (ORDER BY t_raw, src_row) - 1"
        order = "ORDER BY t_raw, src_row"
    else:
        request_id, order = "src_row - 1", ""
    present = {d[0] for d in con.execute("SELECT * FROM stage LIMIT 0").description}
    optional = list(REQUEST_COLUMNS)[4:]
    # Columns up to the last staged one are written; absent ones before it as NULLs, the
    # absent tail is added afterwards as metadata-only columns.
    last = max((i for i, c in enumerate(optional) if c in present), default=-1)
    written = "".join(
        f", {c}" if c in present else f", NULL::{REQUEST_COLUMNS[c]} AS {c}"
        for c in optional[: last + 1]
    )
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            f"""CREATE OR REPLACE TABLE {REQUESTS_TABLE} AS
                SELECT ({request_id})::BIGINT AS request_id,
                       ({arrival})::DOUBLE AS arrival_s,
                       in_v::INTEGER AS input_tokens, out_v::INTEGER AS output_tokens{written}
                FROM stage {order}""",
            params,
        )
        for c in optional[last + 1 :]:
            default = " DEFAULT false" if c == "tokens_estimated" else ""
            con.execute(f"ALTER TABLE {REQUESTS_TABLE} ADD COLUMN {c} {REQUEST_COLUMNS[c]}"
                        f"{default}")
        con.execute(META_DDL)
        con.execute("INSERT INTO trace_meta VALUES (?, ?, ?, ?)",
                    [info.model_dump_json(), json.dumps(warnings), *meta])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("DROP TABLE stage")
