"""Staging table-format traces (CSV/TSV, JSON, JSONL, Parquet) with one DuckDB SELECT.

Detects which table format the file's columns fit (or the one `--format`/`--map` name), then
creates the TEMP `stage` table: each row numbered as in the source, its time, input and output
typed with TRY_CAST, and only the optional columns the format maps. Text formats, whose token
counts come from Python, are staged by `profiler.ingestion.text`; the flow around both is
`profiler.ingestion.ingest`'s.
"""

# ruff: noqa: S608 - SQL here is composed only of constants and column names passed through
# quote_ident; every value (paths, rows, scales) is a bound parameter.

from __future__ import annotations

from typing import Any

from core.errors import FormatDetectionError, UsageError
from profiler.formats.base import FIELDS, FieldMap, TableFormat, quote_ident
from profiler.formats.generic import resolve as resolve_generic
from profiler.formats.registry import TABLE_FORMATS
from profiler.ingestion.columns import scan_sql, typed_columns
from profiler.ingestion.diagnose import diagnose_structure, show_columns
from profiler.ingestion.options import IngestOptions
from profiler.ingestion.sources import OpenedTrace
from profiler.schema import FormatInfo

PARQUET_ROW_COLUMN = "file_row_number"
PARQUET_NUMBERED_SCAN = "read_parquet(?, file_row_number = true)"


# --- detection -------------------------------------------------------------------------------


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
        if fm is not None:  # --map still names its fields' columns (it was dropped here)
            return fmt, _apply_map(fm, options.column_map)
    raise FormatDetectionError(
        f"unknown columns {show_columns(columns)}: no known trace format matches",
        path=opened.source,
        hint="name them with --map input=COL --map output=COL [--map time=COL …]",
    )


def _apply_map(fm: FieldMap, column_map: dict[str, str]) -> FieldMap:
    merged = {k: getattr(fm, k) for k in FIELDS} | column_map
    return FieldMap(**merged)


# --- staging ---------------------------------------------------------------------------------


def stage_table(
    con: Any, opened: OpenedTrace, options: IngestOptions
) -> tuple[FormatInfo, list[str]]:
    """Detect the file's table format and create the TEMP `stage` table from it (one SELECT).

    Raises:
        FormatDetectionError: no format fits the columns (or not the one `--format` names).
        UsageError: a mapped column is not in the file.
    """
    typed = typed_columns(con, opened)
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
    empty = _empty_parquet_columns(con, opened, fm)
    con.execute(_stage_select(opened, fmt, fm, time_is_datetime, names=names, empty=empty),
                [opened.path])
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
        f"IS NOT NULL FROM {scan_sql(opened)} WHERE {col} IS NOT NULL LIMIT 1",
        [opened.path],
    ).fetchone()
    return bool(row and row[0])


def _empty_parquet_columns(con: Any, opened: OpenedTrace, fm: FieldMap) -> set[str]:
    """Mapped optional Parquet columns that are NULL in every row (e.g. a ServeFit file's
    session_id and block_hashes when the trace has none).

    Staging them costs as much as the four core columns together (a list column of NULLs the
    most); an empty column staged or not gives the same table. The file's statistics say it for
    free for a plain column (every value null); for a nested one (a list) they do not tell an
    empty list from NULL, so one count over just those columns confirms them.
    """
    mapped = [c for c in (fm.session, fm.model, fm.hashes, fm.block_size, fm.status) if c]
    if opened.container != "parquet" or not mapped:
        return set()
    rows = con.execute(
        "SELECT split_part(path_in_schema, ', ', 1), bool_and(stats_null_count = num_values), "
        "bool_or(path_in_schema <> split_part(path_in_schema, ', ', 1)) "
        "FROM parquet_metadata(?) GROUP BY 1", [opened.path]).fetchall()
    empty = {c for c, all_null, nested in rows if all_null and not nested and c in mapped}
    nested = [c for c, all_null, nested in rows if all_null and nested and c in mapped]
    if nested:
        counts = con.execute(
            "SELECT " + ", ".join(f"count({quote_ident(c)}) = 0" for c in nested)
            + f" FROM {scan_sql(opened)}", [opened.path]).fetchone()
        empty |= {c for c, none in zip(nested, counts, strict=True) if none}
    return empty


def _stage_select(
    opened: OpenedTrace, fmt: TableFormat, fm: FieldMap, dt: bool, *, names: list[str],
    empty: set[str],
) -> str:
    """CREATE the TEMP stage with the four core columns and only the optional ones mapped.

    Absent optional columns, and mapped ones known to be `empty`, are added at write time as
    metadata-only columns, which is several times cheaper in DuckDB than carrying NULLs through
    every row.
    """
    def col(name: str | None, cast: str) -> str | None:
        if name is None or name in empty:
            return None
        return f"TRY_CAST({quote_ident(name)} AS {cast})"

    if fm.time is None:
        time_sql = "NULL::DOUBLE"
    elif dt:
        time_sql = f"epoch_us(TRY_CAST({quote_ident(fm.time)} AS TIMESTAMPTZ))::DOUBLE"
    else:
        time_sql = f"TRY_CAST({quote_ident(fm.time)} AS DOUBLE)"
    optional = {
        "session_id": col(fm.session, "VARCHAR"),
        "model": col(fm.model, "VARCHAR"),
        "block_hashes": col(fm.hashes, "UBIGINT[]"),
        "block_size": col(fm.block_size, "INTEGER") if fm.block_size else (
            f"{int(fmt.block_size)}::INTEGER" if fmt.block_size and fm.hashes else None),
        "status": fmt.status_sql(fm) or col(fm.status, "VARCHAR"),
    }
    extra = "".join(f", {sql} AS {name}" for name, sql in optional.items() if sql)
    # Parquet numbers its rows as it reads them (file order, no extra pass); a window
    # row_number() over the whole scan costs ~40 % of the staging on 10 M rows.
    if opened.container == "parquet" and PARQUET_ROW_COLUMN not in names:
        src_row, source = f"{PARQUET_ROW_COLUMN} + 1", PARQUET_NUMBERED_SCAN
    else:
        src_row, source = "row_number() OVER ()", scan_sql(opened)
    return f"""
        CREATE OR REPLACE TEMP TABLE stage AS
        SELECT ({src_row})::BIGINT AS src_row, {time_sql} AS t_raw,
               TRY_CAST({quote_ident(fm.input)} AS DOUBLE) AS in_v,
               TRY_CAST({quote_ident(fm.output)} AS DOUBLE) AS out_v{extra}
        FROM {source}
    """
