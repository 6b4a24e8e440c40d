"""Schedules of requests that carry their own arrivals and lengths: a trace window replayed
from a workspace's canonical `requests` table (`trace_schedule`: windowed, time-scaled, lengths
overridden or capped if asked), and a benchmark's own sent requests sent again as they were
(`sent_schedule`). The other loads are `workloads`'s.
"""

from __future__ import annotations

from typing import Any

from core.errors import RunnerError
from core.load import ClosedLoop, LoadSpec, SentRequests, TraceWindow
from runners.load.schedule import Phase, Schedule, ScheduledRequest, kind_of


def trace_schedule(spec: LoadSpec) -> Schedule:
    """The trace window of `spec` (its lengths, a `TraceWindow`) at its own arrivals."""
    window = spec.lengths
    assert isinstance(window, TraceWindow)  # dispatched here by the lengths' kind
    if spec.arrival is not None:
        raise RunnerError("a trace is replayed at its own arrivals: give it no arrival")
    rows = _trace_rows(window, spec.num_requests)
    reqs = [_trace_request(window, i, row) for i, row in enumerate(rows)]
    if not reqs:
        raise RunnerError("the trace window holds no requests: check start_s and duration_s")
    last = reqs[-1].at_s
    assert last is not None  # trace requests are open loop
    end = last if window.duration_s is None else window.duration_s * window.time_scale
    return Schedule(kind=kind_of(spec), requests=reqs, concurrency=spec.max_in_flight,
                    phases=[Phase(name="trace", start_s=0.0, end_s=end)])


def _trace_request(w: TraceWindow, index: int, row: tuple[Any, ...]) -> ScheduledRequest:
    """One row of the window, its lengths overridden and capped as `w` asks."""
    arrival, trace_in, trace_out, hashes, bsize = row
    n_in = w.input_tokens or max(1, int(trace_in or 1))
    n_out = w.output_tokens or max(1, int(trace_out or 1))
    n_in = min(n_in, w.max_input_tokens) if w.max_input_tokens else n_in
    n_out = min(n_out, w.max_output_tokens) if w.max_output_tokens else n_out
    return ScheduledRequest.model_construct(
        index=index, at_s=(arrival - w.start_s) * w.time_scale, phase="trace",
        input_tokens=n_in, output_tokens=n_out,
        block_hashes=list(hashes) if hashes and bsize else None,
        block_size=int(bsize) if hashes and bsize else None)


def _trace_rows(w: TraceWindow, num_requests: int | None) -> list[tuple[Any, ...]]:
    """The window's rows in arrival order, at most `num_requests`; the trace file ingested
    into the workspace (default location when none is named) first when `w` names one."""
    from profiler.ingestion.ingest import ingest
    from profiler.workspace import Workspace

    ws = Workspace.resolve(w.workspace)
    if w.path is not None:
        ingest(w.path, ws)
    end = float("inf") if w.duration_s is None else w.start_s + w.duration_s
    limit = num_requests if num_requests is not None else 2**62
    with ws.connect(read_only=True) as con:
        return con.execute(
            'SELECT arrival_s, input_tokens, output_tokens, block_hashes, block_size '
            'FROM "requests" WHERE arrival_s >= ? AND arrival_s < ? '
            'ORDER BY arrival_s, request_id LIMIT ?',
            [w.start_s, end, limit]).fetchall()


def sent_schedule(spec: LoadSpec) -> Schedule:
    """Sent requests (`core.load.SentRequests`) sent again as they were: open loop at their
    offsets, a closed loop at its concurrency."""
    sent = spec.lengths
    assert isinstance(sent, SentRequests)  # dispatched here by the lengths' kind
    n = len(sent.input_tokens)
    at: list[float] | list[None] = sent.at_s if sent.at_s is not None else [None] * n
    hashes: list[list[int]] | list[None] = sent.block_hashes or [None] * n
    reqs = [ScheduledRequest.model_construct(
        index=i, at_s=t, phase="", input_tokens=n_in, output_tokens=n_out,
        block_hashes=h or None, block_size=sent.block_size if h else None)
        for i, (t, n_in, n_out, h) in enumerate(zip(at, sent.input_tokens, sent.output_tokens,
                                                    hashes, strict=True))]
    cap = (spec.arrival.concurrency if isinstance(spec.arrival, ClosedLoop)
           else spec.max_in_flight)
    end = float("inf") if sent.at_s is None else max(sent.at_s)
    return Schedule(kind=kind_of(spec), requests=reqs, concurrency=cap,
                    phases=[Phase(name="", start_s=0.0, end_s=end)])
