"""The two shapes a trace-format plug-in takes, and the helpers they share.

A `TableFormat` maps columns of a typed table (CSV/TSV, JSONL with scalar fields, Parquet)
onto canonical fields and is read entirely by DuckDB. A `TextFormat` turns JSON objects that
carry prompt text into requests in Python (tokenize or estimate, hash blocks), batch by batch,
and, where it defines `messages`, lists an object's messages for the n-gram acceptance replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from profiler.analysis.ngram_acceptance import Message
from profiler.ingestion.textblocks import TextMeasurer
from profiler.ingestion.timestamps import TimeUnit

FIELDS = ("time", "input", "output", "session", "model", "status", "hashes", "block_size")


def find_column(columns: Iterable[str], *names: str) -> str | None:
    """The actual column whose name matches one of `names` (case and spacing ignored)."""
    wanted = [_norm(n) for n in names]
    by_norm = {_norm(c): c for c in columns}
    for name in wanted:
        if name in by_norm:
            return by_norm[name]
    return None


def _norm(name: str) -> str:
    return name.strip().lower().replace(" ", "_").replace("-", "_")


def quote_ident(name: str) -> str:
    """A DuckDB identifier literal for a column name from a user's file."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class FieldMap:
    """Canonical field -> source column (None: the source has no such field)."""

    time: str | None
    input: str
    output: str
    session: str | None = None
    model: str | None = None
    status: str | None = None
    hashes: str | None = None
    block_size: str | None = None

    def used(self) -> dict[str, str]:
        return {k: v for k in FIELDS if (v := getattr(self, k)) is not None}


@dataclass(frozen=True)
class TableFormat:
    """A plug-in for a typed table. `match` returns the field map when the columns fit."""

    kind: str
    label: str
    match: Callable[[list[str]], FieldMap | None]
    time_unit: TimeUnit | None = None
    time_reason: str = ""
    block_size: int | None = None
    # SQL over the quoted source columns giving `status` when the format defines one.
    status_sql: Callable[[FieldMap], str | None] = field(default=lambda fm: None)

    def explain(self, fm: FieldMap) -> str:
        cols = ", ".join(f"{k}={v!r}" for k, v in fm.used().items())
        return f"{self.label}: columns {cols}"


@dataclass
class RawRequest:
    """One request produced by a text plug-in before normalization."""

    t_raw: float | None
    input_tokens: int
    output_tokens: int
    block_hashes: list[int]
    tokens_estimated: bool
    session_id: str | None = None
    model: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class TextFormat:
    """A plug-in for JSON objects that carry text. `to_requests` may raise TraceError.

    `messages(obj)`: the object's messages in context order, model outputs marked (None: the
    format holds no output text). Called only on objects `to_requests` accepted.
    """

    kind: str
    label: str
    match: Callable[[dict[str, Any]], bool]
    to_requests: Callable[[dict[str, Any], TextMeasurer], list[RawRequest]]
    time_unit: TimeUnit | None = None
    time_reason: str = ""
    columns: dict[str, str] = field(default_factory=dict)
    messages: Callable[[dict[str, Any]], list[Message]] | None = None

    def explain(self) -> str:
        return self.label
