"""The Prometheus text exposition format (0.0.4), parsed: one `PromSample` per sample line,
comments skipped, escaped label values, NaN/±Inf and optional timestamps. Which samples a run
keeps is `engine_metrics`'s; fetching the page `scrape`'s.
"""

from __future__ import annotations

import math
import re

from pydantic import Field

from core.errors import RunnerError
from core.records import Record
from runners.load.failures import one_line

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(RunnerError):
    """A /metrics body that is not Prometheus text format (line number and text named)."""


class PromSample(Record):
    """One sample line: name, labels, value (and the optional timestamp in ms)."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float
    timestamp_ms: int | None = None


def parse_exposition(text: str) -> list[PromSample]:
    """Parse Prometheus text format 0.0.4: comments, labels (escaped values), NaN/±Inf and
    optional timestamps.

    Raises:
        ExpositionError: a line that is neither a comment nor a sample.
    """
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(_parse_line(line))
        except (ValueError, IndexError) as exc:
            raise ExpositionError(f"metrics line {lineno}: {exc}: {one_line(line, 120)}"
                                  ) from None
    return out


def _parse_line(line: str) -> PromSample:
    match = _NAME_RE.match(line)
    if match is None:
        raise ValueError("no metric name")
    name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos + 1)
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise ValueError("expected a value and an optional timestamp")
    return PromSample(name=name, labels=labels, value=_value(rest[0]),
                      timestamp_ms=int(rest[1]) if len(rest) == 2 else None)


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Labels from just after `{`; returns them and the position after `}`."""
    labels: dict[str, str] = {}
    while True:
        while line[pos] in " ,":
            pos += 1
        if line[pos] == "}":
            return labels, pos + 1
        match = _NAME_RE.match(line, pos)
        if match is None or line[match.end()] != "=" or line[match.end() + 1] != '"':
            raise ValueError("bad label")
        value, pos = _label_value(line, match.end() + 2)
        labels[match.group()] = value


def _label_value(line: str, pos: int) -> tuple[str, int]:
    chars = []
    while line[pos] != '"':
        if line[pos] == "\\":
            pos += 1
            chars.append(_ESCAPES.get(line[pos], "\\" + line[pos]))
        else:
            chars.append(line[pos])
        pos += 1
    return "".join(chars), pos + 1


def _value(text: str) -> float:
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
    return special[text.lower()] if text.lower() in special else float(text)
