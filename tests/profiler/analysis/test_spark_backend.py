"""`profile --backend spark` equals the DuckDB profile, figure by figure, on every real trace.

One JVM for the whole module (local[2], 4 shuffle partitions), reused by every test. The DuckDB
profile is the reference here because the DuckDB path's own figures are checked against
independent pandas/numpy computations in test_profile.py; this file checks that the same
queries give the same answers on the other engine. Floats may differ in the last bits (Spark
sums in another order), so they compare to a relative 1e-9; counts and token values exactly.
"""

from __future__ import annotations

import json
import math

import pytest

from core.errors import TraceError
from profiler.analysis.profile import profile_trace
from profiler.workspace import Workspace
from tests import reference as ref

pytestmark = pytest.mark.slow

REL = 1e-9
CAPACITIES = [100, 1_000, 10_000]
TRACE_FILES = sorted(p for p in ref.TRACES.iterdir() if p.name != "SOURCES.md")


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("servefit-test")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _same(duck, spark, where="profile"):
    """Assert two JSON-like values equal: floats to REL, everything else exactly."""
    if isinstance(duck, float) and isinstance(spark, float):
        assert math.isclose(duck, spark, rel_tol=REL, abs_tol=1e-12), (where, duck, spark)
    elif isinstance(duck, dict):
        assert isinstance(spark, dict) and duck.keys() == spark.keys(), where
        for key in duck:
            _same(duck[key], spark[key], f"{where}.{key}")
    elif isinstance(duck, list):
        assert isinstance(spark, list) and len(duck) == len(spark), (where, duck, spark)
        for i, (a, b) in enumerate(zip(duck, spark, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert duck == spark, (where, duck, spark)


@pytest.mark.parametrize("trace", TRACE_FILES, ids=lambda p: p.name)
def test_every_figure_equals_duckdbs(spark, trace, tmp_path):
    from profiler.analysis.spark_backend import profile_trace_spark

    duck = profile_trace(str(trace), workspace=Workspace.resolve(tmp_path / "duck.duckdb"),
                         lru_capacities=CAPACITIES, seed=3)
    on_spark = profile_trace_spark(str(trace),
                                   workspace=Workspace.resolve(tmp_path / "spark.duckdb"),
                                   lru_capacities=CAPACITIES, seed=3, spark=spark)
    _same(duck.model_dump(mode="json"), on_spark.model_dump(mode="json"))
    assert duck.segments, "every trace has at least one segment"


def test_canonical_parquet_read_by_spark_itself(spark, tmp_path):
    # A folder of canonical Parquet parts (as on object storage) is read by Spark, not the
    # local ingester: the figures are the same as the DuckDB profile of the trace behind it.
    from profiler.analysis.spark_backend import profile_trace_spark

    trace = ref.TRACES / "mooncake_conversation_trace.jsonl.gz"  # hashes, > 10,000 rows
    ws = Workspace.resolve(tmp_path / "duck.duckdb")
    duck = profile_trace(str(trace), workspace=ws, lru_capacities=CAPACITIES)
    folder = tmp_path / "canonical"
    folder.mkdir()
    with ws.connect(read_only=True) as con:  # two parts, split mid-trace
        for part, where in enumerate(("request_id < 5000", "request_id >= 5000")):
            con.execute(f"COPY (SELECT * FROM requests WHERE {where}) TO "
                        f"'{folder / f'part-{part}.parquet'}' (FORMAT parquet)")
    on_spark = profile_trace_spark(str(folder), workspace=None, lru_capacities=CAPACITIES,
                                   spark=spark)
    figures = set(duck.model_dump()) - {"format", "warnings"}
    _same(duck.model_dump(mode="json", include=figures),
          on_spark.model_dump(mode="json", include=figures))
    assert on_spark.format.kind == "servefit" and on_spark.format.source == str(folder)


def test_a_folder_that_is_not_canonical_is_one_clear_error(spark, tmp_path):
    from profiler.analysis.spark_backend import profile_trace_spark

    folder = tmp_path / "raw"
    folder.mkdir()
    spark.createDataFrame([(1.0, 10, 20)], ["timestamp", "input_length", "output_length"]) \
        .write.parquet(str(folder / "t"))
    with pytest.raises(TraceError, match="not a ServeFit canonical table: no column "
                                         "'request_id'"):
        profile_trace_spark(str(folder / "t"), workspace=None, lru_capacities=CAPACITIES,
                            spark=spark)


def test_cli_backend_spark_prints_the_duckdb_profile(spark, tmp_path, capsys, monkeypatch):
    # The CLI reuses the module's running session (getOrCreate) and leaves it running.
    from app.cli.main import main

    monkeypatch.chdir(tmp_path)
    trace = str(ref.TRACES / "BurstGPT_3.head400.csv")  # sessions: multi-turn share set
    assert main(["profile", trace, "--json", "--workspace", "d.duckdb"]) == 0
    duck = json.loads(capsys.readouterr().out)
    assert main(["profile", trace, "--json", "--workspace", "s.duckdb", "--backend", "spark",
                 "--spark-master", "local[2]", "-o", "p.json"]) == 0
    on_spark = json.loads(capsys.readouterr().out)
    _same(duck, on_spark)
    assert json.loads((tmp_path / "p.json").read_text()) == on_spark
    assert not spark.sparkContext._jsc.sc().isStopped()


def test_an_unreadable_uri_is_one_clear_error(spark, tmp_path):
    from profiler.analysis.spark_backend import profile_trace_spark

    missing = f"file://{tmp_path}/no-such-folder"
    with pytest.raises(TraceError, match=r"no-such-folder: Spark cannot read it: .*PATH_NOT_FOUND"):
        profile_trace_spark(missing, workspace=None, lru_capacities=CAPACITIES, spark=spark)
