"""Mooncake (Kimi, FAST'25) JSONL: `timestamp` ms, `input_length`, `output_length`, `hash_ids`.

`hash_ids` are prefix-chained ids of 512-token blocks, kept as the request's block hashes.
"""

from __future__ import annotations

from profiler.formats.base import FieldMap, TableFormat, find_column

MOONCAKE_BLOCK_TOKENS = 512


def _match(columns: list[str]) -> FieldMap | None:
    time = find_column(columns, "timestamp")
    inp = find_column(columns, "input_length")
    out = find_column(columns, "output_length")
    if time and inp and out:
        return FieldMap(time=time, input=inp, output=out, hashes=find_column(columns, "hash_ids"))
    return None


FORMAT = TableFormat(
    kind="mooncake",
    label="Mooncake trace",
    match=_match,
    time_unit="ms",
    time_reason="Mooncake timestamps are milliseconds from the trace start",
    block_size=MOONCAKE_BLOCK_TOKENS,
)
