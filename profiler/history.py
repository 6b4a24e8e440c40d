"""The traces the app profiled, kept between restarts: one `profiles` table (one row per trace
content and ingest options, with its Profile JSON) in the app's DuckDB store (`store.duckdb`).

Other packages keep their own tables in the same store file; this module knows only its own.
Every statement binds its values; writes are single statements, so concurrent app sessions
sharing one connection (a cursor each) never see half a row. Times are UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from core.records import Record

_DDL = """CREATE TABLE IF NOT EXISTS profiles (
    trace_digest VARCHAR, options_json VARCHAR, trace_name VARCHAR, trace_path VARCHAR,
    created_at TIMESTAMP, n_requests BIGINT, profile_json VARCHAR,
    PRIMARY KEY (trace_digest, options_json))"""

_SAVE_PROFILE_SQL = """
INSERT OR REPLACE INTO profiles VALUES (?, ?, ?, ?, ?, ?, ?)
"""
_LIST_PROFILES_SQL = """
SELECT trace_digest, options_json, trace_name, trace_path, created_at, n_requests
FROM profiles ORDER BY created_at DESC, rowid DESC LIMIT ?
"""
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


def ensure_tables(con: Any) -> None:
    """Create the profiles table when missing (idempotent)."""
    con.execute(_DDL)


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


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: TIMESTAMPTZ needs pytz to read
