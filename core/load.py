"""The load a prediction is asked about, a benchmark's own requests included: `LoadSpec`.

Two independent choices, each a plug-in keyed by `kind`:
- the requests' lengths: `FixedLengths` (every request ISL + OSL tokens), `DatasetLengths`
  (a published dataset's length distribution, scaled to stated means), a `TraceWindow`
  (the lengths and arrivals of part of a trace) or `SentRequests` (a benchmark's own
  requests, as it sends them: what `bench --predict` and Validate predict);
- how they arrive: `ClosedLoop` (C users, each sending when its last request ends), `Rate`
  (an open-loop Poisson or Gamma process), `Burst` (Poisson stepped up to a peak rate and
  back) or `Offline` (all queued at t = 0).
A trace window and open-loop sent requests carry their own arrivals, so they take no
arrival process. Besides: how many requests, how long the run lasts, a cap on requests in
flight in an open loop, and how the load is run (`core.run_shape`: once, a soak, a sweep, a
boundary). `predict`, the simulator and `bench` all take this one record; each refuses what
it cannot serve.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from core.records import Record
from core.run_shape import RunShape, Single, Sweep

# What one deployment's load can mean, checked up front so that a typo (an extra three zeros)
# is one line, not a simulation that fills the host's memory (19 GB in 30 s for 10^9 queued
# requests): a context window no model has, more users or requests than one prediction can
# hold, a rate no cluster serves.
MAX_TOKENS = 10_000_000  # Llama-4-Scout's 10 M-token window, the longest published
MAX_CONCURRENCY = 100_000
MAX_REQUESTS = 10_000_000  # ~1 min and ~200 MB of simulation
MAX_RATE_RPS = 1_000_000.0
# One request in ~12 days. Below it the clock (seconds in float64) loses a step's time: at
# --rate 1e-300 arrivals are 1e300 s apart, 1e300 + 0.009 == 1e300, and predict answered
# TPOT 0 and E2E = TTFT for 200-token outputs.
MIN_RATE_RPS = 1e-6
MAX_TIME_SCALE = 1_000_000.0


# Length distributions a published benchmark states (`recommender.sim.lengths.SHAPES` draws
# them): ShareGPT's own (`vllm bench serve --dataset-name sharegpt`), or the random
# dataset's uniform spread with a range ratio of 0.8 (`--dataset-name random
# --random-range-ratio 0.8` in the bench_serving form InferenceX runs: each length uniform
# between 0.8x and 1x its set length).
Dataset = Literal["sharegpt", "random-range-0.8"]


class FixedLengths(Record):
    """Every request has `input_tokens` prompt and `output_tokens` generated tokens."""

    kind: Literal["fixed"] = "fixed"
    input_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Prompt tokens per request (ISL).")
    output_tokens: int = Field(ge=1, le=MAX_TOKENS,
                               description="Generated tokens per request (OSL).")


class DatasetLengths(Record):
    """Lengths drawn (seeded) from a named dataset's distribution of (prompt, output) pairs,
    scaled so their means are `input_tokens` / `output_tokens` (a benchmark that states a
    dataset and its mean lengths, e.g. `vllm bench serve` on ShareGPT). The distributions
    are the consumer's (`recommender.sim.lengths`)."""

    kind: Literal["dataset"] = "dataset"
    dataset: Dataset = Field(description="Whose length distribution.")
    input_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Mean prompt tokens per request.")
    output_tokens: int = Field(ge=1, le=MAX_TOKENS,
                               description="Mean generated tokens per request.")


class TraceWindow(Record):
    """The requests of a trace (its lengths and arrivals) between `start_s` and
    `start_s + duration_s`, their gaps multiplied by `time_scale` (0.5 = twice the rate, as
    `bench --time-scale` and the simulator's `time_scale` say it). The trace is a file
    (`path`), a workspace's `requests` table (`workspace`), or both: the file ingested into
    that workspace first. Lengths may be overridden or capped per request."""

    kind: Literal["trace"] = "trace"
    path: str | None = Field(default=None, min_length=1,
                             description="Trace file (any format ingest reads).")
    workspace: str | None = Field(default=None, min_length=1,
                                  description="Workspace whose `requests` table is replayed.")
    start_s: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                           description="Window start, trace seconds.")
    duration_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                     description="Window length, trace seconds (None: to the end).")
    time_scale: float = Field(default=1.0, gt=0, le=MAX_TIME_SCALE, allow_inf_nan=False,
                              description="Multiplier of the trace's gaps (0.5 = twice as fast).")
    input_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                     description="Every request's prompt tokens instead.")
    output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                      description="Every request's output tokens instead.")
    max_input_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                         description="Cap on each prompt's tokens.")
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                          description="Cap on each output's tokens.")

    @model_validator(mode="after")
    def _a_source(self) -> TraceWindow:
        if self.path is None and self.workspace is None:
            raise ValueError("a trace window needs a trace file (--trace) or a workspace "
                             "holding one")
        return self


class SentRequests(Record):
    """Requests exactly as a benchmark sends them (`runners.load.schedule.Schedule.load_spec`),
    in send order: each one's send offset from the run start (open loop; None for a closed
    loop, whose users send as their last request ends), prompt and output tokens, and its
    prompt's chained block hashes (equal hash = equal prefix) when the run shares prefixes.
    An open-loop run carries its own arrivals, so it takes no arrival process."""

    kind: Literal["requests"] = "requests"
    at_s: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        default=None, description="Send offsets, seconds (None: a closed loop).")
    input_tokens: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]] = Field(
        min_length=1, max_length=MAX_REQUESTS, description="Prompt tokens per request.")
    output_tokens: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]] = Field(
        min_length=1, max_length=MAX_REQUESTS, description="Generated tokens per request.")
    block_hashes: list[list[int]] | None = Field(
        default=None, description="Per request, its prompt's chained block hashes.")
    block_size: int | None = Field(default=None, ge=1, description="Tokens per hashed block.")

    @model_validator(mode="after")
    def _aligned(self) -> SentRequests:
        n = len(self.input_tokens)
        if len(self.output_tokens) != n or any(
                x is not None and len(x) != n for x in (self.at_s, self.block_hashes)):
            raise ValueError("every per-request list needs one entry per request")
        if (self.block_hashes is None) != (self.block_size is None):
            raise ValueError("block hashes and block_size come together")
        return self


class ClosedLoop(Record):
    """`concurrency` users, each sending its next request when the last one ends."""

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY, description="Requests in flight at once.")


class Rate(Record):
    """Open-loop arrivals at `rate_rps`: Poisson, or Gamma gaps with coefficient of
    variation `cv` (1 = Poisson; > 1 burstier)."""

    kind: Literal["rate"] = "rate"
    rate_rps: float = Field(ge=MIN_RATE_RPS, le=MAX_RATE_RPS, allow_inf_nan=False,
                            description="Mean arrival rate, requests/s.")
    process: Literal["poisson", "gamma"] = "poisson"
    cv: float = Field(default=1.0, gt=0, le=100.0, allow_inf_nan=False,
                      description="Gamma gaps' coefficient of variation.")


class Burst(Record):
    """Poisson arrivals at `base_rate_rps` for `steady_s`, at `peak_rate_rps` for `burst_s`,
    then at the base rate again for `steady_s` (how a deployment absorbs a step up and
    recovers)."""

    kind: Literal["burst"] = "burst"
    base_rate_rps: float = Field(ge=MIN_RATE_RPS, le=MAX_RATE_RPS, allow_inf_nan=False,
                                 description="Rate before and after the burst, requests/s.")
    peak_rate_rps: float = Field(ge=MIN_RATE_RPS, le=MAX_RATE_RPS, allow_inf_nan=False,
                                 description="Rate during the burst, requests/s.")
    steady_s: float = Field(gt=0, allow_inf_nan=False,
                            description="Steady time before and after the burst.")
    burst_s: float = Field(gt=0, allow_inf_nan=False, description="Length of the burst.")

    def phases(self) -> list[tuple[str, float, float, float]]:
        """(name, start_s, end_s, rate_rps) of the steady, burst and recovery phases."""
        s, b = self.steady_s, self.burst_s
        return [("steady", 0.0, s, self.base_rate_rps), ("burst", s, s + b, self.peak_rate_rps),
                ("recovery", s + b, 2 * s + b, self.base_rate_rps)]


class Offline(Record):
    """Every request queued at t = 0 (a max-throughput run)."""

    kind: Literal["offline"] = "offline"


Lengths = Annotated[FixedLengths | DatasetLengths | TraceWindow | SentRequests,
                    Field(discriminator="kind")]
Arrival = Annotated[ClosedLoop | Rate | Burst | Offline, Field(discriminator="kind")]


class LoadSpec(Record):
    """What load to serve: lengths, arrivals, how many requests or for how long, a cap on
    requests in flight (open loop), how it is run, and the seed of every random choice
    (arrival draws). The validator gives one line for a combination no consumer can run."""

    lengths: Lengths
    arrival: Arrival | None = Field(default=None, description="None only for a trace "
                                    "window, which carries its own arrivals.")
    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS,
                                     description="Requests in all (None: the consumer's "
                                     "default for the arrival kind).")
    duration_s: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Run length, seconds: an open "
        "loop's arrivals up to it, a closed loop sends until it (None: bounded by the count).")
    max_in_flight: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY,
                                      description="Open loop: most requests in flight at once.")
    run: RunShape = Field(default_factory=Single, description="Once, a soak, a sweep or a "
                          "boundary (`core.run_shape`).")
    seed: int = Field(default=0, description="Seed of every random choice.")

    @model_validator(mode="after")
    def _consistent(self) -> LoadSpec:
        if isinstance(self.lengths, SentRequests):
            self._sent(self.lengths)
        elif self.arrival is None and self.lengths.kind != "trace":
            raise ValueError("fixed lengths need an arrival: closed_loop, rate, burst or "
                             "offline")
        elif isinstance(self.arrival, Offline) and (
                self.num_requests is None and self.lengths.kind != "trace"):
            raise ValueError("an offline load of fixed or dataset lengths needs num_requests")
        shapes = {"soak": self._soak_problem, "sweep": self._sweep_problem,
                  "boundary": self._boundary_problem}
        problem = self._bounds_problem() or shapes.get(self.run.kind, lambda: None)()
        if problem is not None:
            raise ValueError(problem)
        return self

    def _bounds_problem(self) -> str | None:
        """A duration, a count or an in-flight cap where the arrivals have no use for it."""
        own = self.arrival is None or isinstance(self.lengths, SentRequests)
        if self.duration_s is not None and (own or isinstance(self.arrival, (Burst, Offline))):
            return ("a run's duration bounds a rate or a concurrency: a trace window has its "
                    "own (its duration_s), sent requests their count, a burst its phases, an "
                    "offline load none")
        if self.num_requests is not None and isinstance(self.arrival, Burst):
            return "a burst sends its rates over its phases: leave the request count out"
        if self.max_in_flight is not None and isinstance(self.arrival, (ClosedLoop, Offline)):
            return ("a cap on requests in flight is an open loop's; a closed loop's cap is "
                    "its concurrency")
        return None

    def _soak_problem(self) -> str | None:
        """A soak: a duration, and a steady Poisson rate or a closed loop."""
        if self.duration_s is None:
            return "a soak runs for a duration: give duration_s (--duration-s)"
        steady = isinstance(self.arrival, ClosedLoop) or (
            isinstance(self.arrival, Rate) and self.arrival.process == "poisson")
        return None if steady else "a soak holds a Poisson rate or a concurrency steady"

    def _sweep_problem(self) -> str | None:
        """A sweep: a closed loop whose concurrency (the first level) is at most the cap."""
        assert isinstance(self.run, Sweep)
        if not isinstance(self.arrival, ClosedLoop):
            return "a sweep runs a closed loop at increasing concurrency: give a concurrency"
        if self.arrival.concurrency > self.run.max_concurrency:
            return "a sweep's first concurrency is above its cap"
        return None

    def _boundary_problem(self) -> str | None:
        """A boundary: a trace window or Poisson arrivals with fixed lengths, each step bounded
        by a count or a duration."""
        lengths, arrival = self.lengths, self.arrival
        trace = isinstance(lengths, TraceWindow) and arrival is None
        poisson = isinstance(lengths, FixedLengths) and isinstance(arrival, Rate) and (
            arrival.process == "poisson")
        if not (trace or poisson):
            return ("a boundary replays a trace, or a Poisson rate with fixed prompt and "
                    "output tokens")
        window = lengths.duration_s if isinstance(lengths, TraceWindow) else self.duration_s
        if self.num_requests is None and window is None:
            return "a boundary needs a request count or a duration (each step's bound)"
        return None

    def _sent(self, sent: SentRequests) -> None:
        """Sent requests are their own count; open loop, their own arrivals."""
        if self.num_requests is not None and self.num_requests != len(sent.input_tokens):
            raise ValueError("sent requests are their own count: leave num_requests unset")
        closed = isinstance(self.arrival, ClosedLoop)
        if (sent.at_s is None) != closed:
            raise ValueError("sent requests take a closed_loop arrival exactly when they "
                             "have no send offsets")


def fixed(input_tokens: int, output_tokens: int, *, concurrency: int | None = None,
          rate_rps: float | None = None, offline: bool = False,
          num_requests: int | None = None, seed: int = 0,
          dataset: Dataset | None = None, duration_s: float | None = None) -> LoadSpec:
    """A `LoadSpec` from exactly one of concurrency, rate or offline (the CLI's and the
    benchmarks' way of asking): fixed lengths, or with `dataset` that dataset's length
    distribution scaled to these means (`DatasetLengths`), for `num_requests` and/or
    `duration_s`; raises ValueError otherwise."""
    chosen = [x for x in (concurrency is not None, rate_rps is not None, offline) if x]
    if len(chosen) != 1:
        raise ValueError("give exactly one of concurrency, rate or offline")
    arrival: ClosedLoop | Rate | Offline = (
        ClosedLoop(concurrency=concurrency) if concurrency is not None
        else Rate(rate_rps=rate_rps) if rate_rps is not None else Offline())
    lengths: FixedLengths | DatasetLengths = (
        FixedLengths(input_tokens=input_tokens, output_tokens=output_tokens) if dataset is None
        else DatasetLengths(dataset=dataset, input_tokens=input_tokens,
                            output_tokens=output_tokens))
    return LoadSpec(lengths=lengths, arrival=arrival, num_requests=num_requests,
                    duration_s=duration_s, seed=seed)
