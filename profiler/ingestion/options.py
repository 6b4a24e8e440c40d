"""How a trace is read: `IngestOptions`, the one record every ingest stage takes.

It lives apart from `profiler.ingestion.ingest` so that the stages `ingest` drives (`checks`,
`text`) can take it without importing the module that imports them.
"""

from __future__ import annotations

from pydantic import Field

from core.records import Record
from profiler.ingestion.timestamps import TimeUnit


class IngestOptions(Record):
    """How to read a trace; every field is optional and has a stated default."""

    format: str | None = Field(default=None, description="force a format kind instead of detecting")
    column_map: dict[str, str] = Field(default_factory=dict, description="field -> column")
    time_unit: TimeUnit | None = Field(default=None, description="override the timestamp rule")
    tokenizer_dir: str | None = Field(default=None, description="local HF tokenizer folder")
    synthesize_arrivals_rps: float | None = Field(
        default=None, gt=0, description="Poisson arrivals at this rate when the trace has no times"
    )
    seed: int = 0
    max_decompressed_bytes: int | None = Field(default=None, gt=0)
