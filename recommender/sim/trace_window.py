"""The window of a trace the recommender simulates: the canonical `requests` table turned
into `SimRequests` (named apart from `runners.load.workloads`, what a benchmark sends).

Owns choosing the window of a trace the recommender simulates (all of it, or the busiest
`max_requests` consecutive requests when the trace is larger), reading it with prompt block
hashes as flat arrays, the smaller coarse-search window inside it, and the round-robin split
of arrivals over data-parallel replicas. Rows the simulator cannot serve (failed, no arrival,
zero tokens) are left out and counted.
"""

# ruff: noqa: S608 - the only names composed into SQL are the constant REQUESTS_TABLE and
# `read_parquet(?)`; every value is a bound parameter.

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import UsageError
from profiler.schema import REQUESTS_TABLE
from profiler.workspace import Workspace
from recommender.sim.simulator import SimRequests

PARQUET_RELATION = "read_parquet(?)"
_VALID = (
    "arrival_s IS NOT NULL AND input_tokens >= 1 AND output_tokens >= 1 "
    "AND coalesce(status, '') <> 'failure'"
)


@dataclass(slots=True)
class Workload:
    """The simulated requests (first arrival at 0 s) and what part of the source they are."""

    requests: SimRequests
    total_valid: int  # servable rows in the whole source
    dropped: int  # rows left out: failed, no arrival, zero tokens
    start_s: float  # window start on the source's time axis
    description: str
    too_long: int = 0  # requests left out for exceeding the model's context

    def drop_longer_than(self, max_tokens: int) -> None:
        """Leave out requests whose prompt + output exceed `max_tokens` (the model's context:
        no configuration can serve them), and say so in the description."""
        req = self.requests
        keep = np.flatnonzero(req.input_tokens + req.output_tokens <= max_tokens)
        if len(keep) == len(req.arrival_s):
            return
        if not len(keep):
            raise UsageError(f"every request is longer than the model's {max_tokens:,}-token "
                             "context")
        self.too_long = len(req.arrival_s) - len(keep)
        self.requests = take(req, keep, rebase=True)
        self.description += (f"; {self.too_long:,} requests longer than the model's "
                              f"{max_tokens:,}-token context left out")

    @property
    def n(self) -> int:
        return len(self.requests.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.requests.arrival_s[-1] - self.requests.arrival_s[0])

    @property
    def rate_rps(self) -> float:
        """Offered request rate of the window (n / span; n when all arrive at once)."""
        span = self.duration_s
        return self.n / span if span > 0 else float(self.n)

    @property
    def has_hashes(self) -> bool:
        return self.requests.block_hashes is not None


def load_workload(workspace: Workspace, *, max_requests: int) -> Workload:
    """The workspace's trace as a workload: all of it, or its busiest `max_requests` window.

    Raises:
        WorkspaceError: no trace in the workspace.
        UsageError: no servable request in the trace.
    """
    with workspace.connect(read_only=True) as con:
        return _load(con, REQUESTS_TABLE, [], max_requests)


def load_parquet_workload(path: str, *, max_requests: int) -> Workload:
    """A canonical-table Parquet file (e.g. written by `profiler.synthesis.synth`) as a workload."""
    import duckdb

    from profiler.workspace import is_interrupt

    with duckdb.connect() as con:
        try:
            return _load(con, PARQUET_RELATION, [path], max_requests)
        except (RuntimeError, duckdb.Error) as exc:  # Ctrl-C in a query: the CLI's one line
            if is_interrupt(exc):
                raise KeyboardInterrupt from None
            raise


def _load(con: Any, relation: str, params: list[Any], max_requests: int) -> Workload:
    numbered = (
        f"SELECT row_number() OVER (ORDER BY request_id) - 1 AS k, * FROM {relation} "
        f"WHERE {_VALID}"
    )
    total, valid = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {_VALID}) FROM {relation}", params
    ).fetchone()
    if not valid:
        raise UsageError("the trace has no servable request (all failed or zero tokens)")
    start = 0
    if valid > max_requests:
        start = con.execute(
            f"WITH v AS ({numbered}) SELECT k, lead(arrival_s, ?) OVER (ORDER BY k) - arrival_s "
            "AS span FROM v QUALIFY span IS NOT NULL ORDER BY span, k LIMIT 1",
            [*params, max_requests - 1],
        ).fetchone()[0]
    count = min(valid, max_requests)
    with con.cursor() as cur:
        table = cur.sql(
            f"WITH v AS ({numbered}) SELECT arrival_s, input_tokens, output_tokens, block_hashes, "
            "block_size FROM v WHERE k >= ? AND k < ? ORDER BY k",
            params=[*params, start, start + count],
        ).to_arrow_table()
    requests, t0 = _requests(table)
    if valid > max_requests:
        what = (f"the busiest {count:,} consecutive requests of {valid:,} (shortest span), "
                f"from t = {t0:,.1f} s")
    else:
        what = f"all {count:,} servable requests"
    if total > valid:
        what += f"; {total - valid:,} failed or zero-token rows left out"
    return Workload(requests, int(valid), int(total - valid), t0, what)


def _requests(table: Any) -> tuple[SimRequests, float]:
    import pyarrow as pa

    arrival = np.asarray(table.column("arrival_s").to_numpy(), dtype=np.float64)
    t0 = float(arrival[0])
    inp = np.asarray(table.column("input_tokens").to_numpy(), dtype=np.int64)
    out = np.asarray(table.column("output_tokens").to_numpy(), dtype=np.int64)
    sizes = {int(s) for s in table.column("block_size").drop_null().to_pylist()}
    hashes = offsets = None
    block = None
    if len(sizes) == 1 and table.column("block_hashes").null_count < table.num_rows:
        column = table.column("block_hashes").combine_chunks()
        if isinstance(column, pa.ChunkedArray):
            column = pa.concat_arrays(column.chunks)
        column = column.fill_null(pa.scalar([], column.type))
        raw_offsets = np.asarray(column.offsets, dtype=np.int64)
        values = np.asarray(column.values, dtype=np.uint64)
        hashes = values[raw_offsets[0]:raw_offsets[-1]].copy()
        offsets = raw_offsets - raw_offsets[0]
        block = sizes.pop()
    return SimRequests(arrival - t0, inp, out, hashes, offsets, block), t0


def head_window(req: SimRequests, n: int) -> SimRequests:
    """The busiest `n` consecutive requests (shortest span; the coarse-search window)."""
    if n >= len(req.arrival_s):
        return req
    arr = req.arrival_s
    spans = arr[n - 1:] - arr[: len(arr) - n + 1]
    start = int(np.argmin(spans))
    return take(req, np.arange(start, start + n), rebase=True)


def replica_share(requests: SimRequests, replicas: int) -> SimRequests:
    """Replica 0's requests when arrivals are dealt round-robin over `replicas` copies."""
    if replicas <= 1:
        return requests
    return take(requests, np.arange(0, len(requests.arrival_s), replicas), rebase=False)


def take(requests: SimRequests, index: np.ndarray, *, rebase: bool) -> SimRequests:
    """The requests at `index` (ascending), hashes and offsets cut to match."""
    arrival = requests.arrival_s[index]
    if rebase and len(arrival):
        arrival = arrival - arrival[0]
    hashes = offsets = None
    if requests.block_hashes is not None and requests.block_offsets is not None:
        starts, ends = requests.block_offsets[index], requests.block_offsets[index + 1]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        hashes = requests.block_hashes[flat]
    return SimRequests(arrival, requests.input_tokens[index], requests.output_tokens[index],
                       hashes, offsets, requests.block_size)
