"""The recommendations history table in a real DuckDB file: round trips, order, bound values,
and its sharing one store file with the profiler's profiles table."""

from __future__ import annotations

import json

import duckdb
import pytest

from profiler import history as profiles
from recommender.decision import history as recommendations


@pytest.fixture
def con(tmp_path):
    with duckdb.connect(str(tmp_path / "store.duckdb")) as connection:
        yield connection


def test_recommendations_round_trip(con):
    ids = [recommendations.save_recommendation(
               con, trace_digest="a", trace_name="a.csv", title=f"t{i}",
               request_json=f'{{"i": {i}}}', body_json='{"same": 1}')
           for i in range(3)]
    assert len(set(ids)) == 3  # identical bodies still get distinct ids
    entries = recommendations.list_recommendations(con)
    assert [e.title for e in entries] == ["t2", "t1", "t0"]
    assert recommendations.load_recommendation(con, ids[1]) == ('{"i": 1}', '{"same": 1}')
    assert recommendations.load_recommendation(con, "nope") is None
    assert recommendations.list_recommendations(con, limit=1)[0].rec_id == ids[2]


def test_values_are_bound_not_interpolated(con):
    title = "x'); DROP TABLE recommendations; --"
    rec_id = recommendations.save_recommendation(con, trace_digest="a", trace_name="a.csv",
                                                 title=title, request_json="{}", body_json="{}")
    assert recommendations.list_recommendations(con)[0].title == title
    assert recommendations.load_recommendation(con, rec_id) == ("{}", "{}")


def test_a_store_written_before_the_split_still_reads(tmp_path):
    # The table the profiler's history created before it moved here, with a row in it.
    path = str(tmp_path / "store.duckdb")
    with duckdb.connect(path) as con:
        con.execute("""CREATE TABLE recommendations (
            rec_id VARCHAR PRIMARY KEY, created_at TIMESTAMP, trace_digest VARCHAR,
            trace_name VARCHAR, title VARCHAR, request_json VARCHAR, body_json VARCHAR)""")
        con.execute("INSERT INTO recommendations VALUES ('old1', TIMESTAMP '2024-05-01 10:00:00', "
                    "'d', 'd.csv', 'vLLM on 1x H100', '{\"r\": 1}', '{\"b\": 2}')")
    with duckdb.connect(path) as con:
        [entry] = recommendations.list_recommendations(con)
        assert (entry.rec_id, entry.title, entry.trace_name) == ("old1", "vLLM on 1x H100", "d.csv")
        assert entry.created_at.isoformat() == "2024-05-01T10:00:00"
        assert recommendations.load_recommendation(con, "old1") == ('{"r": 1}', '{"b": 2}')
        new = recommendations.save_recommendation(con, trace_digest="d", trace_name="d.csv",
                                                  title="new", request_json="{}", body_json="{}")
        assert [e.rec_id for e in recommendations.list_recommendations(con)] == [new, "old1"]


def test_both_tables_share_one_store(con):
    profiles.save_profile(con, trace_digest="a", options_json="{}", trace_name="a.csv",
                          trace_path="/t/a.csv", n_requests=3, profile_json=json.dumps({"n": 3}))
    rec_id = recommendations.save_recommendation(con, trace_digest="a", trace_name="a.csv",
                                                 title="t", request_json="{}", body_json="{}")
    assert [e.trace_digest for e in profiles.list_profiles(con)] == ["a"]
    assert [e.rec_id for e in recommendations.list_recommendations(con)] == [rec_id]
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables")
              .fetchall()}
    assert tables == {"profiles", "recommendations"}
