"""Azure LLM inference traces 2023 (Splitwise) and 2024 (DynamoLLM).

Columns `TIMESTAMP` (datetime text), `ContextTokens`, `GeneratedTokens`; no sessions, no text.
"""

from __future__ import annotations

from profiler.formats.base import FieldMap, TableFormat, find_column


def _match(columns: list[str]) -> FieldMap | None:
    time = find_column(columns, "TIMESTAMP")
    ctx = find_column(columns, "ContextTokens")
    gen = find_column(columns, "GeneratedTokens")
    if time and ctx and gen:
        return FieldMap(time=time, input=ctx, output=gen)
    return None


FORMAT = TableFormat(
    kind="azure",
    label="Azure LLM inference trace (2023/2024)",
    match=_match,
    time_unit="datetime",
    time_reason="Azure writes TIMESTAMP as a datetime (no zone: read as UTC)",
)
