"""The reads that stream the trace's rows to Python instead of aggregating them in SQL (`Scans`),
and DuckDB's own: the rate windows from one pass over the table in arrival order, and every
block hash in request order (the LRU simulation's input). Another engine's backend brings its
own (`profiler.analysis.spark_backend`).
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from profiler.schema import REQUESTS_TABLE

_SECONDS_SQL = f"""
SELECT floor(arrival_s)::BIGINT, input_tokens, output_tokens FROM {REQUESTS_TABLE}
WHERE arrival_s IS NOT NULL
"""
RATE_BATCH_ROWS = 1 << 18


@dataclass(frozen=True)
class Scans:
    """The two reads that stream the trace's rows to Python instead of aggregating in SQL.

    `rate_windows(con, window_s, duration_s)` gives the rows of
    `profiler.analysis.timing._WINDOWS_SQL`, or None to run that query instead;
    `flat_hashes(con)` gives every block hash in request order (the LRU simulation's input).
    DuckDB's are `rate_windows` and `flat_hashes` below; another engine's backend
    (`profiler.analysis.spark_backend`) brings its own.
    """

    rate_windows: Callable[[Any, int, float], list[tuple[int, ...]] | None]
    flat_hashes: Callable[[Any], tuple[Any, Any]]


def rate_windows(con: Any, window: int, duration: float) -> list[tuple[int, ...]] | None:
    """The rows of `profiler.analysis.timing._WINDOWS_SQL` in one streaming pass, or None if
    the rows are not in time order.

    The table is stored in arrival order, so each second's (and minute's) requests are one run
    of rows: run lengths give the 1 s and 60 s peaks without DuckDB hashing ~duration groups
    (1.8 M on the bench trace, the profile's costliest query), and the few rate windows are
    bincounts. Memory: one batch of rows and one slot per window.
    """
    n_windows = int(duration) // window + 1
    # A fresh cursor: the relation API refuses a connection with an unfinished result, and
    # it streams Arrow without the extra copy of a DB-API result.
    with con.cursor() as cur:
        return _scan_windows(cur.sql(_SECONDS_SQL).to_arrow_reader(RATE_BATCH_ROWS), window,
                             n_windows)


def _scan_windows(reader: Any, window: int, n_windows: int) -> list[tuple[int, ...]] | None:
    import numpy as np

    counts = np.zeros(n_windows, np.int64)
    inputs, outputs = np.zeros(n_windows, np.int64), np.zeros(n_windows, np.int64)
    runs = {1: _Runs(), 60: _Runs()}
    for batch in reader:
        sec = _ints(batch.column(0))
        if len(sec) == 0:
            continue
        if not runs[1].add(sec):
            return None
        runs[60].add(sec // 60)
        w = sec // window
        counts += np.bincount(w, minlength=n_windows)
        # float weights are exact here: one batch's sum stays far below 2^53.
        for total, column in ((inputs, 1), (outputs, 2)):
            weights = _ints(batch.column(column)).astype(np.float64)
            total[:] += np.bincount(w, weights=weights, minlength=n_windows).astype(np.int64)
    peak1, peak60 = runs[1].peak(), runs[60].peak()
    return [(i, int(counts[i]), int(inputs[i]), int(outputs[i]), peak1, peak60)
            for i in range(n_windows)]


def _ints(array: Any) -> Any:
    """An integer Arrow array as a numpy array, zero-copy when it holds no nulls. Not
    `to_numpy()`: pyarrow imports pandas for it, 0.3 s of a cold profile that needs no pandas."""
    import numpy as np
    import pyarrow as pa

    if array.null_count or not pa.types.is_signed_integer(array.type):
        return array.to_numpy(zero_copy_only=False)
    width = array.type.bit_width // 8
    return np.frombuffer(array.buffers()[1], dtype=np.dtype(f"<i{width}"), count=len(array),
                         offset=array.offset * width)


class _Runs:
    """The longest run of equal values across a sorted stream of integer arrays."""

    def __init__(self) -> None:
        self.best = 0
        self.last: int | None = None
        self.open = 0  # length of the run of `last` so far

    def add(self, values: Any) -> bool:
        """Take the next sorted chunk; False when the stream is not sorted."""
        import numpy as np

        if (self.last is not None and values[0] < self.last) or np.any(values[1:] < values[:-1]):
            return False
        starts = np.flatnonzero(np.diff(values)) + 1
        lengths = np.diff(np.concatenate(([0], starts, [len(values)])))
        if values[0] == self.last:
            lengths[0] += self.open
        else:
            self.best = max(self.best, self.open)
        self.best = max(self.best, int(lengths[:-1].max(initial=0)))
        self.last, self.open = int(values[-1]), int(lengths[-1])
        return True

    def peak(self) -> int:
        return max(self.best, self.open)


def flat_hashes(con: Any) -> tuple[Any, Any]:
    """All block hashes in request order, flat, with per-request offsets (numpy)."""
    import numpy as np
    import pyarrow as pa

    # A fresh cursor: the relation API refuses a connection with an unfinished result.
    with con.cursor() as cur:
        table = cur.sql(
            f"SELECT coalesce(block_hashes, []::UBIGINT[]) AS h FROM {REQUESTS_TABLE} "
            "ORDER BY request_id"
        ).to_arrow_table()
    column = table.column("h").combine_chunks()
    if isinstance(column, pa.ChunkedArray):  # zero-row tables stay chunked
        column = pa.concat_arrays(column.chunks) if column.chunks else pa.array([], column.type)
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = np.asarray(column.values, dtype=np.uint64)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]
