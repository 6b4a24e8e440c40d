"""The project's one exception tree.

Every error a user can cause derives from `ServeFitError` and carries one line that says what
went wrong, where (file, row, column) and how to fix it. Front-ends print that line and exit
with code 2; third-party errors (DuckDB, gzip, JSON, HTTP) are mapped to these at the
boundary. Each package raises the family that names its stage: `TraceError` and
`WorkspaceError` (profiler), `CatalogError` (recommender), `RunnerError` (runners);
`UsageError` is a bad argument anywhere.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only its type: pydantic is imported by whoever validates
    from pydantic import ValidationError

# C0 controls but tab/newline/CR, DEL and C1: an escape sequence in a server's message or a
# file name would drive the user's terminal (colours, cursor moves, a fake prompt).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every terminal control character shown as its escape (`\x1b`)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def first_problem(exc: ValidationError) -> tuple[str, str]:
    """A validation error's first problem for a one-line message: its field path, dotted
    ("" at the top level), and pydantic's message without the "Value error, " it puts before
    a validator's own text (pydantic lists every problem over many lines)."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return where, str(first["msg"]).removeprefix("Value error, ")


class ServeFitError(Exception):
    """Root of every error ServeFit raises on purpose."""

    exit_code = 2


class UsageError(ServeFitError):
    """A command-line or API argument is invalid."""


class TraceError(ServeFitError):
    """A trace file cannot be read or does not hold valid requests."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        row: int | None = None,
        column: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = path
        self.row = row
        self.column = column
        self.hint = hint
        super().__init__(self._compose(message))

    def _compose(self, message: str) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column {self.column!r}")
        text = f"{': '.join([', '.join(where), message]) if where else message}"
        return f"{text} ({self.hint})" if self.hint else text


class FormatDetectionError(TraceError):
    """No known trace format matches and no column map was given."""


class WorkspaceError(ServeFitError):
    """The DuckDB workspace or the app's store is missing what was asked for, or cannot be
    opened or written."""


class CatalogError(ServeFitError):
    """A GPU or model catalog, or a model `config.json`, is missing, malformed or inconsistent."""


class UnknownCatalogEntryError(CatalogError, UsageError):
    """A GPU or model name matches no catalog entry; the message suggests the closest ones."""


class RunnerError(ServeFitError):
    """A run-level problem: launching, readiness, or a request spec that cannot be sent."""


__all__ = [
    "CatalogError", "FormatDetectionError", "RunnerError", "ServeFitError", "TraceError",
    "UnknownCatalogEntryError", "UsageError", "WorkspaceError",
]
