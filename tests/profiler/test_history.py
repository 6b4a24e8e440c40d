"""The app's history tables in a real DuckDB file: round trips, order, replacement."""

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


def test_recommendations_round_trip(con):
    ids = [history.save_recommendation(con, trace_digest="a", trace_name="a.csv", title=f"t{i}",
                                       request_json=f'{{"i": {i}}}', body_json='{"same": 1}')
           for i in range(3)]
    assert len(set(ids)) == 3  # identical bodies still get distinct ids
    entries = history.list_recommendations(con)
    assert [e.title for e in entries] == ["t2", "t1", "t0"]
    assert history.load_recommendation(con, ids[1]) == ('{"i": 1}', '{"same": 1}')
    assert history.load_recommendation(con, "nope") is None
    assert history.list_recommendations(con, limit=1)[0].rec_id == ids[2]


def test_values_are_bound_not_interpolated(con):
    title = "x'); DROP TABLE recommendations; --"
    rec_id = history.save_recommendation(con, trace_digest="a", trace_name="a.csv", title=title,
                                         request_json="{}", body_json="{}")
    assert history.list_recommendations(con)[0].title == title
    assert history.load_recommendation(con, rec_id) == ("{}", "{}")
