"""Checks on the staged rows before anything is written: validation and the time rule.

`validate` rejects the first bad timestamp or token count, naming file, row and column and the
value as read; `time_spec` decides what the time column means (unit, epoch or relative) and
rejects mixed units; `count_backwards` counts rows that arrive before their predecessor.
"""

# ruff: noqa: S608 - SQL here is composed only of constants and column names passed through
# quote_ident; every value (paths, rows, bounds) is a bound parameter.

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import TraceError
from core.load import MAX_TOKENS
from profiler.formats.base import quote_ident
from profiler.formats.registry import TABLE_FORMATS, TEXT_FORMATS
from profiler.ingestion.columns import scan_sql
from profiler.ingestion.sources import OpenedTrace
from profiler.ingestion.timestamps import TimeSpec, detect_numeric, epoch_class
from profiler.schema import FormatInfo

if TYPE_CHECKING:
    from profiler.ingestion.options import IngestOptions

# A request's token count: at most the longest context any model has (core.load.MAX_TOKENS);
# 2^31 - 1 fit the INTEGER column but overflowed the profile's sums of it.
MAX_TOKENS_PER_REQUEST = MAX_TOKENS
_BAD_COUNT = "({v} IS NULL OR isnan({v}) OR {v} < 0 OR {v} <> floor({v}) OR {v} > {m})"


def validate(con: Any, opened: OpenedTrace, info: FormatInfo) -> int:
    """The number of staged requests, once every time and token count is valid.

    Raises:
        TraceError: no requests, or the first (lowest row) bad value, with file, row and column.
    """
    timed = info.arrivals == "trace"
    bad_t = "t_raw IS NULL OR isnan(t_raw) OR isinf(t_raw)" if timed else "false"
    n, bad_time, bad_in, bad_out = con.execute(
        f"""SELECT count(*),
               min(src_row) FILTER (WHERE {bad_t}),
               min(src_row) FILTER (WHERE {_BAD_COUNT.format(v="in_v", m=MAX_TOKENS_PER_REQUEST)}),
               min(src_row) FILTER (WHERE {_BAD_COUNT.format(v="out_v", m=MAX_TOKENS_PER_REQUEST)})
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
        what = ("a valid timestamp" if fld == "time" else
                f"a whole token count from 0 to {MAX_TOKENS_PER_REQUEST:,}")
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
        f"{quote_ident(column)} FROM {scan_sql(opened)}) WHERE rn = ?",
        [opened.path, row],
    ).fetchone()
    if value is None or value[0] is None:
        return "an empty value"
    return repr(value[0][:60])


def time_spec(
    con: Any, opened: OpenedTrace, info: FormatInfo, options: IngestOptions
) -> TimeSpec | None:
    """What the staged times mean, or None when the trace has none.

    Raises:
        TraceError: a detected epoch column mixes units (the first odd row named).
    """
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


def count_backwards(con: Any) -> int:
    """Rows that arrive before their predecessor in file order.

    `stage` was filled in src_row order and DuckDB preserves insertion order, so a streaming
    lag over () compares file neighbours without sorting.
    """
    (back,) = con.execute(
        "SELECT count(*) FROM (SELECT t_raw < lag(t_raw) OVER () AS b FROM stage) WHERE b"
    ).fetchone()
    return int(back)
