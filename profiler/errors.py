"""The project's one exception tree.

Every error a user can cause derives from `ServeFitError` and carries one line that says what
went wrong, where (file, row, column) and how to fix it. Front-ends print that line and exit
with code 2; third-party errors (DuckDB, gzip, JSON) are mapped to these at the boundary.
"""

from __future__ import annotations


class ServeFitError(Exception):
    """Root of every error ServeFit raises on purpose."""

    exit_code = 2


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
    """The DuckDB workspace is missing what was asked for, or cannot be opened."""


class UsageError(ServeFitError):
    """A command-line or API argument is invalid."""
