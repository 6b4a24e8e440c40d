"""The profiles history table in a real DuckDB file: order, replacement, round trip."""

from __future__ import annotations

import json

import duckdb
import pytest

from profiler import history


@pytest.fixture
def con(tmp_path):
    with duckdb.connect(str(tmp_path / "store.duckdb")) as connection:
        yield connection


def _profile(con, digest: str, options: str = "{}", n: int = 10) -> None:
    history.save_profile(con, trace_digest=digest, options_json=options, trace_name=f"{digest}.csv",
                         trace_path=f"/t/{digest}.csv", n_requests=n,
                         profile_json=json.dumps({"n_requests": n}))


def test_profiles_newest_first_and_replaced_per_content_and_options(con):
    _profile(con, "a")
    _profile(con, "b")
    _profile(con, "a", n=11)  # same content and options: refreshed, not duplicated
    _profile(con, "a", options='{"format": "azure"}')
    entries = history.list_profiles(con)
    assert [(e.trace_digest, e.options_json) for e in entries] == [
        ("a", '{"format": "azure"}'), ("a", "{}"), ("b", "{}")]
    assert entries[1].n_requests == 11
    assert json.loads(history.load_profile_json(con, "a", "{}")) == {"n_requests": 11}
    assert history.load_profile_json(con, "zzz", "{}") is None
