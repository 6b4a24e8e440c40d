"""ServeFit's own canonical table (what `synth` writes and `export` reads back)."""

from __future__ import annotations

from profiler.formats.base import FieldMap, TableFormat, find_column


def _match(columns: list[str]) -> FieldMap | None:
    if not all(find_column(columns, n) for n in ("arrival_s", "input_tokens", "output_tokens")):
        return None
    if not find_column(columns, "request_id"):
        return None
    return FieldMap(
        time="arrival_s",
        input="input_tokens",
        output="output_tokens",
        session=find_column(columns, "session_id"),
        model=find_column(columns, "model"),
        status=find_column(columns, "status"),
        hashes=find_column(columns, "block_hashes"),
        block_size=find_column(columns, "block_size"),
    )


FORMAT = TableFormat(
    kind="servefit",
    label="ServeFit canonical request table",
    match=_match,
    time_unit="s",
    time_reason="arrival_s is relative seconds by definition",
)
