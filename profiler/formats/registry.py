"""Trace-format plug-ins, keyed by kind. Detection tries them in this order."""

from __future__ import annotations

from profiler.formats import (
    azure,
    burstgpt,
    canonical,
    generic,
    mooncake,
    openai,
    sharegpt,
)
from profiler.formats.base import TableFormat, TextFormat

TABLE_FORMATS: dict[str, TableFormat] = {
    f.kind: f
    for f in (canonical.FORMAT, azure.FORMAT, burstgpt.FORMAT, mooncake.FORMAT, generic.FORMAT)
}
TEXT_FORMATS: dict[str, TextFormat] = {f.kind: f for f in (sharegpt.FORMAT, openai.FORMAT)}
ALL_KINDS: tuple[str, ...] = (*TABLE_FORMATS, *TEXT_FORMATS)
