"""A workload's `Schedule`: the requests in send order (`ScheduledRequest`: an arrival offset,
or None in a closed loop), the concurrency limit, the named phases of the run, and its offered
rate; and the short label of a load that reports and run ids carry (`kind_of`: `bench`'s
`--workload` vocabulary, `BENCH_KINDS`). Which schedule a `core.load.LoadSpec` gives is
`workloads`'s; sending it the load generator's.
"""

from __future__ import annotations

import bisect
from typing import Literal, get_args

from pydantic import Field

from core.errors import RunnerError
from core.load import Burst, ClosedLoop, LoadSpec, Rate, SentRequests
from core.records import Record
from core.run_shape import Single

ScheduleKind = Literal["trace", "poisson", "gamma", "concurrency", "burst", "soak", "boundary",
                       "sweep"]
# What `bench --workload` runs, one name per label; front ends list these.
BENCH_KINDS: tuple[str, ...] = get_args(ScheduleKind)


def kind_of(load: LoadSpec) -> ScheduleKind:
    """The label of `load`: its run shape (soak, sweep, boundary), else its arrival's
    (a closed loop "concurrency", a rate its process, a burst), else a replay's ("trace":
    a trace window or open-loop sent requests)."""
    if not isinstance(load.run, Single):
        return load.run.kind
    if isinstance(load.arrival, Rate):
        return load.arrival.process
    if isinstance(load.arrival, (ClosedLoop, Burst)):
        return "concurrency" if isinstance(load.arrival, ClosedLoop) else "burst"
    return "trace"


class ScheduledRequest(Record):
    """One request of a schedule. Shared prefixes come as the trace's chained block hashes."""

    index: int
    at_s: float | None = Field(description="Send offset from the run start; None = closed loop.")
    phase: str = ""
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    block_hashes: list[int] | None = None
    block_size: int | None = None


class Phase(Record):
    """A named stretch of the run, [start_s, end_s) from the run start."""

    name: str
    start_s: float
    end_s: float


class Schedule(Record):
    """The requests in send order, the concurrency limit, and the phases of the run."""

    kind: ScheduleKind
    requests: list[ScheduledRequest]
    concurrency: int | None = Field(default=None,
                                    description="Most requests in flight; None = no cap.")
    duration_s: float | None = Field(default=None,
                                     description="Closed loop: stop sending after this.")
    cycle: bool = Field(default=False,
                        description="Closed loop: reuse `requests` until duration_s.")
    phases: list[Phase] = Field(default_factory=list)

    @property
    def open_loop(self) -> bool:
        return bool(self.requests) and self.requests[0].at_s is not None

    def load_spec(self) -> LoadSpec:
        """These requests as `predict` takes them (`core.load.SentRequests`), exactly as sent:
        open loop at their offsets, closed loop at the concurrency limit.

        Raises:
            RunnerError: a pool cycled until a duration (how many requests it sends depends
                on the server's speed), an open-loop run capped at a concurrency (the
                simulator's open loop has no cap), or no requests.
        """
        if self.cycle:
            raise RunnerError("a closed loop bounded by time sends as many requests as the "
                              "server finishes: give a request count to predict it")
        if not self.requests:
            raise RunnerError("the schedule holds no requests")
        if self.open_loop and self.concurrency is not None:
            raise RunnerError("an open-loop run capped at a concurrency cannot be predicted "
                              "as sent: leave the cap out")
        sizes = {r.block_size for r in self.requests if r.block_hashes}
        shared = len(sizes) == 1  # one block size: the prefixes can be compared
        sent = SentRequests(
            at_s=[r.at_s or 0.0 for r in self.requests] if self.open_loop else None,
            input_tokens=[r.input_tokens for r in self.requests],
            output_tokens=[r.output_tokens for r in self.requests],
            block_hashes=[r.block_hashes or [] for r in self.requests] if shared else None,
            block_size=sizes.pop() if shared else None)
        if self.open_loop:
            return LoadSpec(lengths=sent)
        assert self.concurrency is not None  # every closed-loop kind requires one
        return LoadSpec(lengths=sent, arrival=ClosedLoop(concurrency=self.concurrency))

    def request(self, index: int) -> ScheduledRequest:
        """The record sent as the `index`-th request (pools repeat; the index does not)."""
        return self.requests[index % len(self.requests)] if self.cycle else self.requests[index]

    def phase_at(self, t_s: float) -> str:
        """Name of the phase holding offset `t_s` (the first/last one outside them)."""
        if not self.phases:
            return ""
        starts = [p.start_s for p in self.phases]
        return self.phases[max(0, bisect.bisect_right(starts, t_s) - 1)].name


def offered_rps(schedule: Schedule) -> float:
    """An open-loop schedule's offered rate: requests over the span of their send offsets
    (the recommender's window rate, `recommender.sim.trace_window.Workload.rate_rps`)."""
    at = [r.at_s for r in schedule.requests if r.at_s is not None]
    span = max(at, default=0.0) - min(at, default=0.0)
    return len(at) / span if span > 0 else float(len(at))
