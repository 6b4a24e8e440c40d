"""The recommendations the app keeps between restarts: one `recommendations` table (one row per
recommendation, its request and result as JSON) in the app's DuckDB store.

The same store file holds the profiler's `profiles` table (`profiler.history`); each package
owns its own table. The bodies are opaque JSON here; callers validate them with
`recommender.decision.recommendation`'s records. Every statement binds its values; a save is one
statement, so concurrent app sessions sharing one connection (a cursor each) never see half a
row. Times are UTC.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from core.records import Record

# Same table and columns as before the table moved here, so existing stores keep working.
_DDL = """CREATE TABLE IF NOT EXISTS recommendations (
    rec_id VARCHAR PRIMARY KEY, created_at TIMESTAMP, trace_digest VARCHAR,
    trace_name VARCHAR, title VARCHAR, request_json VARCHAR, body_json VARCHAR)"""
_SAVE_SQL = "INSERT INTO recommendations VALUES (?, ?, ?, ?, ?, ?, ?)"
_LIST_SQL = """
SELECT rec_id, created_at, trace_digest, trace_name, title FROM recommendations
ORDER BY created_at DESC, rowid DESC LIMIT ?
"""
_LOAD_SQL = "SELECT request_json, body_json FROM recommendations WHERE rec_id = ?"
DEFAULT_LIMIT = 200


class RecommendationEntry(Record):
    """A saved recommendation as listed in the history."""

    rec_id: str
    created_at: datetime = Field(description="when it was saved, naive UTC")
    trace_digest: str
    trace_name: str
    title: str = Field(description="one line: engine, config label, GPU and model")


def ensure_table(con: Any) -> None:
    """Create the recommendations table when missing (idempotent)."""
    con.execute(_DDL)


def save_recommendation(con: Any, *, trace_digest: str, trace_name: str, title: str,
                        request_json: str, body_json: str) -> str:
    """Store one recommendation; returns its id."""
    ensure_table(con)
    created = datetime.now(UTC).replace(tzinfo=None)  # naive UTC: TIMESTAMPTZ needs pytz to read
    # Content-derived id: no random source, and the same save twice gives two distinct rows.
    rec_id = hashlib.sha256(f"{created.isoformat()}|{body_json}".encode()).hexdigest()[:16]
    con.execute(_SAVE_SQL, [rec_id, created, trace_digest, trace_name, title,
                            request_json, body_json])
    return rec_id


def list_recommendations(con: Any, limit: int = DEFAULT_LIMIT) -> list[RecommendationEntry]:
    """Saved recommendations, newest first."""
    ensure_table(con)
    keys = RecommendationEntry.model_fields
    return [RecommendationEntry(**dict(zip(keys, row, strict=True)))
            for row in con.execute(_LIST_SQL, [limit]).fetchall()]


def load_recommendation(con: Any, rec_id: str) -> tuple[str, str] | None:
    """(request JSON, recommendation JSON) of a saved recommendation, or None."""
    ensure_table(con)
    row = con.execute(_LOAD_SQL, [rec_id]).fetchone()
    return None if row is None else (row[0], row[1])
