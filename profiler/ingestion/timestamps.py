"""How a trace's time column becomes `arrival_s`: the stated detection rule and its override.

Rule, in order (the first that applies wins; `--time-unit` replaces it):
1. A column of datetimes (typed, or text that parses as one) is a datetime; a naive datetime is
   read as UTC (only differences matter).
2. The trace format fixes the unit (Mooncake: ms; BurstGPT, Azure numeric, ServeFit: s).
3. A unit suffix in the column name: `_ns`, `_us`, `_ms`, `_s`/`_sec`/`_seconds`.
4. By magnitude of the median value: >= 1e17 epoch ns, >= 1e14 epoch µs, >= 1e11 epoch ms,
   >= 1e9 epoch s (2001-09-09 onwards); smaller values are relative seconds.
A numeric epoch column whose values fall in more than one of those magnitude classes has mixed
units and is refused. Arrival is always measured from the first request, so epoch vs relative
only matters for detection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from core.errors import UsageError

TimeUnit = Literal["s", "ms", "us", "ns", "datetime"]
# The names a user may give (`--time-unit`, the app's choice), in this order.
TIME_UNITS: tuple[TimeUnit, ...] = get_args(TimeUnit)

SECONDS_PER_UNIT: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}

# (lower bound of the median value, unit) for epoch detection, largest first.
EPOCH_CLASSES: tuple[tuple[float, str], ...] = (
    (1e17, "ns"),
    (1e14, "us"),
    (1e11, "ms"),
    (1e9, "s"),
)

_NAME_HINTS: tuple[tuple[str, str], ...] = (
    (r"(^|_)(ns|nanos|nanoseconds)$", "ns"),
    (r"(^|_)(us|micros|microseconds)$", "us"),
    (r"(^|_)(ms|millis|milliseconds|msec)$", "ms"),
    (r"(^|_)(s|sec|secs|seconds)$", "s"),
)


@dataclass(frozen=True)
class TimeSpec:
    """How to read one time column: its unit and the sentence that says why."""

    unit: TimeUnit
    reason: str
    epoch: bool = False

    @property
    def seconds_per_unit(self) -> float:
        return 1e-6 if self.unit == "datetime" else SECONDS_PER_UNIT[self.unit]


def parse_unit(text: str) -> TimeUnit:
    """Validate a user's `--time-unit` value."""
    for unit in TIME_UNITS:
        if text == unit:
            return unit
    raise UsageError(f"--time-unit must be one of {', '.join(TIME_UNITS)}, not {text!r}")


def unit_from_name(column: str) -> str | None:
    """Unit implied by a column name's suffix (`arrival_ms` -> ms), if any."""
    name = column.strip().lower().replace(" ", "_")
    for pattern, unit in _NAME_HINTS:
        if re.search(pattern, name):
            return unit
    return None


def epoch_class(value: float) -> str | None:
    """The epoch unit a value's magnitude implies, or None for relative-looking values."""
    for bound, unit in EPOCH_CLASSES:
        if abs(value) >= bound:
            return unit
    return None


def detect_numeric(column: str, median: float) -> TimeSpec:
    """Apply rules 3 and 4 to a numeric time column."""
    hinted = unit_from_name(column)
    if hinted is not None:
        return TimeSpec(hinted, f"unit {hinted} from the column name {column!r}")  # type: ignore[arg-type]
    unit = epoch_class(median)
    if unit is not None:
        return TimeSpec(
            unit,  # type: ignore[arg-type]
            f"epoch {unit}: median value {median:.6g} is in the epoch-{unit} range",
            epoch=True,
        )
    return TimeSpec(
        "s", f"relative seconds: median value {median:.6g} is below the epoch ranges"
    )
