"""The profile's DuckDB SQL, transpiled to Spark SQL: the one place the two dialects meet.

Every figure's query is written once, in DuckDB's dialect, next to the code that reads its rows
(`profiler.analysis.timing`, `profiler.analysis.figures`, `profiler.analysis.quantiles`,
`profiler.analysis.segments`); `to_spark` turns it into Spark SQL with sqlglot, plus two
rewrites sqlglot cannot know about:

* `WITH x AS MATERIALIZED (…)`: a DuckDB planner hint Spark's parser refuses; dropped.
* A window with no ORDER BY (`lag(arrival_s) OVER ()`): DuckDB reads the table in stored order,
  which is request_id order (the canonical table's contract), so the DuckDB query need not
  sort; Spark keeps no row order, so the order is spelled out as `ORDER BY request_id`.

Placeholders (`?`) stay positional, so the caller binds the same parameters on either engine.
sqlglot is imported here only, and only when a query is transpiled.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["ROW_ORDER_COLUMN", "to_spark"]

# The canonical table's stored order (DESIGN §2.1): request_id is the arrival rank.
ROW_ORDER_COLUMN = "request_id"


@functools.lru_cache(maxsize=256)
def to_spark(duckdb_sql: str) -> str:
    """The Spark SQL text of one DuckDB query (cached: the profile asks for the same few).

    Raises:
        sqlglot.errors.ParseError: `duckdb_sql` is not valid DuckDB SQL (a ServeFit bug).
    """
    import sqlglot

    tree = sqlglot.parse_one(duckdb_sql, read="duckdb")
    tree = tree.transform(_drop_materialized).transform(_order_bare_windows)
    return tree.sql(dialect="spark")


def _drop_materialized(node: Any) -> Any:
    from sqlglot import exp

    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)
    return node


def _order_bare_windows(node: Any) -> Any:
    from sqlglot import exp

    # Only order-sensitive functions: a bare `sum(k) OVER ()` is a total, the same unordered.
    ordered = (exp.Lag, exp.Lead, exp.RowNumber, exp.FirstValue, exp.LastValue)
    if (isinstance(node, exp.Window) and isinstance(node.this, ordered)
            and not node.args.get("order") and not node.args.get("partition_by")):
        node.set("order", exp.Order(expressions=[exp.Ordered(this=exp.column(ROW_ORDER_COLUMN))]))
    return node
