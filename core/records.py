"""The one base of every typed record: `Record`, and `MutableRecord` for the few a stage
fills in place.

A record rejects unknown fields (a typo in a file or a call is an error, not a silently
dropped value) and is frozen, so a value handed to the next stage cannot change under it.
`MutableRecord` lifts only the freezing, for records that are built up step by step (a
request assembled from form fields, a run's metadata updated as it goes).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Frozen, and unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MutableRecord(Record):
    """A record whose fields may be assigned after construction (still no unknown fields)."""

    model_config = ConfigDict(frozen=False)
