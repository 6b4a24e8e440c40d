"""Exceptions raised by the engine plug-ins.

`EngineError` is the engines' family in the project's one tree (`core.errors`, the only
package of ours `engines/` imports), so a front end that prints a `ServeFitError` prints these
too. Messages are one line: what is refused and why.
"""

from __future__ import annotations

from core.errors import ServeFitError


class EngineError(ServeFitError):
    """Root of every error an engine plug-in raises on purpose."""


class UnknownEngineError(EngineError, KeyError):
    """No plug-in is registered under the requested kind."""

    def __str__(self) -> str:
        # KeyError's str() wraps the message in quotes; keep it a plain line.
        return str(self.args[0]) if self.args else ""


class CapabilityError(EngineError):
    """The engine cannot run this config on this hardware/model (or cannot express it).

    Attributes:
        reason: one line saying what is refused and why, fit to show a user as is.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ExportError(EngineError):
    """The request cannot be exported, or the bundle cannot be written (one line)."""
