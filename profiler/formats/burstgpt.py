"""BurstGPT (HPMLL): `Timestamp`, `Model`, `Request tokens`, `Response tokens`, ….

Both layouts: v1 without sessions, v3 with `Session ID` and `Elapsed time` inserted at columns
2 and 3. Timestamps are seconds from the trace's origin day. A row with zero response tokens is
a failed request (BurstGPT's convention); it is kept with status `failure`.
"""

from __future__ import annotations

from profiler.formats.base import FieldMap, TableFormat, find_column, quote_ident


def _match(columns: list[str]) -> FieldMap | None:
    time = find_column(columns, "Timestamp")
    req = find_column(columns, "Request tokens")
    resp = find_column(columns, "Response tokens")
    if not (time and req and resp):
        return None
    return FieldMap(
        time=time,
        input=req,
        output=resp,
        session=find_column(columns, "Session ID"),
        model=find_column(columns, "Model"),
    )


def _status(fm: FieldMap) -> str:
    out = quote_ident(fm.output)
    return f"CASE WHEN TRY_CAST({out} AS DOUBLE) = 0 THEN 'failure' ELSE 'success' END"


FORMAT = TableFormat(
    kind="burstgpt",
    label="BurstGPT",
    match=_match,
    time_unit="s",
    time_reason="BurstGPT timestamps are seconds from the trace's origin",
    status_sql=_status,
)
