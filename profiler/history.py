"""What the app keeps between restarts: the traces it profiled and the recommendations it made.

Two small tables in a DuckDB store (the app's `store.duckdb`): `profiles` (one row per trace
content and ingest options, with its Profile JSON) and `recommendations` (one row per
recommendation, its request and result as JSON). The bodies are opaque JSON here, so this
module knows nothing about engines; callers validate them with their own records.
Every statement binds its values; writes are single statements, so concurrent app sessions
sharing one connection (a cursor each) never see half a row. Times are UTC.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from profiler.schema import Record

_DDL = (
    """CREATE TABLE IF NOT EXISTS profiles (
        trace_digest VARCHAR, options_json VARCHAR, trace_name VARCHAR, trace_path VARCHAR,
        created_at TIMESTAMP, n_requests BIGINT, profile_json VARCHAR,
        PRIMARY KEY (trace_digest, options_json))""",
    """CREATE TABLE IF NOT EXISTS recommendations (
        rec_id VARCHAR PRIMARY KEY, created_at TIMESTAMP, trace_digest VARCHAR,
        trace_name VARCHAR, title VARCHAR, request_json VARCHAR, body_json VARCHAR)""",
)

_SAVE_PROFILE_SQL = """
INSERT OR REPLACE INTO profiles VALUES (?, ?, ?, ?, ?, ?, ?)
"""
_LIST_PROFILES_SQL = """
SELECT trace_digest, options_json, trace_name, trace_path, created_at, n_requests
FROM profiles ORDER BY created_at DESC, rowid DESC LIMIT ?
"""
_SAVE_REC_SQL = "INSERT INTO recommendations VALUES (?, ?, ?, ?, ?, ?, ?)"
_LIST_RECS_SQL = """
SELECT rec_id, created_at, trace_digest, trace_name, title FROM recommendations
ORDER BY created_at DESC, rowid DESC LIMIT ?
"""
_LOAD_REC_SQL = "SELECT request_json, body_json FROM recommendations WHERE rec_id = ?"
_LOAD_PROFILE_SQL = """
SELECT profile_json FROM profiles WHERE trace_digest = ? AND options_json = ?
"""
DEFAULT_LIMIT = 200


class ProfileEntry(Record):
    """A profiled trace as listed in the history (the Profile JSON is loaded on demand)."""

    trace_digest: str
    options_json: str
    trace_name: str
    trace_path: str
    created_at: datetime
    n_requests: int


class RecommendationEntry(Record):
    """A saved recommendation as listed in the history."""

    rec_id: str
    created_at: datetime
    trace_digest: str
    trace_name: str
    title: str = Field(description="one line: engine, config label, GPU and model")


def ensure_tables(con: Any) -> None:
    """Create the history tables when missing (idempotent)."""
    for ddl in _DDL:
        con.execute(ddl)


def save_profile(con: Any, *, trace_digest: str, options_json: str, trace_name: str,
                 trace_path: str, n_requests: int, profile_json: str) -> None:
    """Record (or refresh) the profile of one trace content read with one set of options."""
    ensure_tables(con)
    con.execute(_SAVE_PROFILE_SQL, [trace_digest, options_json, trace_name, trace_path,
                                    _now(), n_requests, profile_json])


def list_profiles(con: Any, limit: int = DEFAULT_LIMIT) -> list[ProfileEntry]:
    """Profiled traces, newest first."""
    ensure_tables(con)
    keys = ProfileEntry.model_fields
    return [ProfileEntry(**dict(zip(keys, row, strict=True)))
            for row in con.execute(_LIST_PROFILES_SQL, [limit]).fetchall()]


def load_profile_json(con: Any, trace_digest: str, options_json: str) -> str | None:
    """The stored Profile JSON of a trace, or None."""
    ensure_tables(con)
    row = con.execute(_LOAD_PROFILE_SQL, [trace_digest, options_json]).fetchone()
    return None if row is None else row[0]


def save_recommendation(con: Any, *, trace_digest: str, trace_name: str, title: str,
                        request_json: str, body_json: str) -> str:
    """Store one recommendation; returns its id."""
    ensure_tables(con)
    created = _now()
    # Content-derived id: no random source, and the same save twice gives two distinct rows.
    rec_id = hashlib.sha256(f"{created.isoformat()}|{body_json}".encode()).hexdigest()[:16]
    con.execute(_SAVE_REC_SQL, [rec_id, created, trace_digest, trace_name, title,
                                request_json, body_json])
    return rec_id


def list_recommendations(con: Any, limit: int = DEFAULT_LIMIT) -> list[RecommendationEntry]:
    """Saved recommendations, newest first."""
    ensure_tables(con)
    keys = RecommendationEntry.model_fields
    return [RecommendationEntry(**dict(zip(keys, row, strict=True)))
            for row in con.execute(_LIST_RECS_SQL, [limit]).fetchall()]


def load_recommendation(con: Any, rec_id: str) -> tuple[str, str] | None:
    """(request JSON, recommendation JSON) of a saved recommendation, or None."""
    ensure_tables(con)
    row = con.execute(_LOAD_REC_SQL, [rec_id]).fetchone()
    return None if row is None else (row[0], row[1])


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: TIMESTAMPTZ needs pytz to read
