"""What to send and when: `build_schedule` turns a `core.load.LoadSpec` into a `Schedule` of
requests (`schedule`), deterministic for its seed.

Plug-ins, keyed by kind: requests that carry their own arrivals (a trace window, sent
requests: `replay`) by their lengths' kind; the others by their arrival's (a Poisson or Gamma
rate, a burst, a closed loop), with fixed lengths. Open-loop arrivals give every request an
offset `at_s`; a closed loop gives `at_s=None` and a concurrency limit, and when it is bounded
by time only its request list is a pool the load generator cycles through. The run shape
(`core.run_shape`) picks the first schedule: a soak's windows; a sweep's first level (its
levels are `runners.benchmark.bench_request.schedules_of`'s); a boundary's first step
(`boundary_steps` gives them all: the trace or Poisson load at increasing compression, stopped
by its caller's stop rule, `runners.benchmark.boundary`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from core.arrivals import exact_count_poisson, piecewise_poisson, renewal_times
from core.errors import RunnerError
from core.load import Burst, ClosedLoop, FixedLengths, LoadSpec, Rate
from core.run_shape import Boundary, Soak
from runners.load.replay import sent_schedule, trace_schedule
from runners.load.schedule import Phase, Schedule, ScheduledRequest, kind_of

# Closed-loop runs bounded by time reuse this many distinct request records (prompts still
# differ: they are built from the sent index, not the pool slot).
POOL_SIZE = 4096

Builder = Callable[[LoadSpec], Schedule]


def build_schedule(spec: LoadSpec) -> Schedule:
    """The schedule of `spec`'s first run (a sweep's first level, a boundary's first step).

    Raises:
        RunnerError: a load bench cannot send (dataset lengths, offline, no bound).
    """
    return _SHAPES[spec.run.kind](spec)


def _one_run(spec: LoadSpec) -> Schedule:
    """By the lengths' kind when they carry their own arrivals, else by the arrival's."""
    by_lengths = _REPLAYS.get(spec.lengths.kind)
    if by_lengths is not None:
        return by_lengths(spec)
    assert spec.arrival is not None  # LoadSpec requires one for fixed or dataset lengths
    builder = _ARRIVALS.get(spec.arrival.kind)
    if builder is None:
        raise RunnerError(f"bench sends a rate, a burst or a concurrency; an {spec.arrival.kind}"
                          " load (every request queued at t = 0) is predict's")
    return builder(spec)


def _synthetic(spec: LoadSpec, at: Sequence[float | None],
               phases: list[str]) -> list[ScheduledRequest]:
    if not isinstance(spec.lengths, FixedLengths):
        raise RunnerError("bench sends fixed prompt and output tokens, a trace or sent "
                          "requests; a dataset's length distribution is predict's")
    p, o = spec.lengths.input_tokens, spec.lengths.output_tokens
    return [ScheduledRequest.model_construct(index=i, at_s=t, phase=ph, input_tokens=p,
                                             output_tokens=o, block_hashes=None, block_size=None)
            for i, (t, ph) in enumerate(zip(at, phases, strict=True))]


def _one_phase(spec: LoadSpec, at: np.ndarray) -> Schedule:
    """Open-loop requests at offsets `at`, in one phase named after the load's label that ends
    at the duration (else at the last arrival)."""
    kind = kind_of(spec)
    end = spec.duration_s if spec.duration_s is not None else float(at[-1]) if len(at) else 0.0
    reqs = _synthetic(spec, at.tolist(), [kind] * len(at))
    return Schedule(kind=kind, requests=reqs, concurrency=spec.max_in_flight,
                    phases=[Phase(name=kind, start_s=0.0, end_s=end)])


def _rate(spec: LoadSpec) -> Schedule:
    """Poisson with a duration: exactly rate × duration arrivals at Poisson times
    (`core.arrivals.exact_count_poisson`), the first `num_requests` of them. Otherwise
    renewal times (exponential or Gamma gaps with mean 1/rate, shape 1/cv²) cut at the
    duration and/or the request count."""
    rate = spec.arrival
    assert isinstance(rate, Rate)  # dispatched here by the arrival's kind
    rng = np.random.default_rng(spec.seed)
    if spec.duration_s is None and spec.num_requests is None:
        raise RunnerError("an open-loop rate needs a request count or a duration")
    if rate.process == "poisson" and spec.duration_s is not None:
        at = exact_count_poisson(rng, rate.rate_rps, 0.0, spec.duration_s)
        return _one_phase(spec, at[:spec.num_requests])
    at = renewal_times(rng, rate.rate_rps, count=spec.num_requests, end_s=spec.duration_s,
                       process=rate.process, cv=rate.cv)
    return _one_phase(spec, at)


def _closed(spec: LoadSpec, phases: list[Phase]) -> Schedule:
    """`concurrency` requests in flight, each replaced as it finishes: `num_requests` of
    them, or a pool cycled until the duration."""
    loop = spec.arrival
    assert isinstance(loop, ClosedLoop)
    if spec.duration_s is None and spec.num_requests is None:
        raise RunnerError("a closed loop needs a request count or a duration")
    n = spec.num_requests if spec.num_requests is not None else POOL_SIZE
    reqs = _synthetic(spec, [None] * n, [phases[0].name if phases else ""] * n)
    return Schedule(kind=kind_of(spec), requests=reqs, concurrency=loop.concurrency,
                    duration_s=spec.duration_s, cycle=spec.num_requests is None, phases=phases)


def _concurrency(spec: LoadSpec) -> Schedule:
    end = spec.duration_s if spec.duration_s is not None else float("inf")
    return _closed(spec, [Phase(name="concurrency", start_s=0.0, end_s=end)])


def _piecewise(spec: LoadSpec, pieces: list[tuple[Phase, float]]) -> Schedule:
    """Poisson at each phase's rate in turn (`core.arrivals.piecewise_poisson`)."""
    got = piecewise_poisson(np.random.default_rng(spec.seed),
                            [(p.start_s, p.end_s, rate) for p, rate in pieces])
    at = [t for part in got for t in part.tolist()]
    names = [p.name for (p, _), part in zip(pieces, got, strict=True) for _ in part]
    return Schedule(kind=kind_of(spec), requests=_synthetic(spec, at, names),
                    concurrency=spec.max_in_flight, phases=[p for p, _ in pieces])


def _burst(spec: LoadSpec) -> Schedule:
    """Poisson at base rate for steady_s, at peak rate for burst_s, at base again for
    steady_s (`core.load.Burst.phases`)."""
    burst = spec.arrival
    assert isinstance(burst, Burst)
    return _piecewise(spec, [(Phase(name=name, start_s=t0, end_s=t1), rate)
                             for name, t0, t1, rate in burst.phases()])


def _soak(spec: LoadSpec) -> Schedule:
    """A long steady load (Poisson rate or concurrency) split into windows `w0, w1, …` to
    see drift."""
    soak, duration = spec.run, spec.duration_s
    assert isinstance(soak, Soak) and duration is not None  # LoadSpec's validator requires it
    n = math.ceil(duration / soak.window_s)
    phases = [Phase(name=f"w{k}", start_s=k * soak.window_s,
                    end_s=min((k + 1) * soak.window_s, duration)) for k in range(n)]
    if isinstance(spec.arrival, Rate):
        return _piecewise(spec, [(p, spec.arrival.rate_rps) for p in phases])
    return _closed(spec, phases)


def boundary_steps(spec: LoadSpec) -> list[tuple[float, Schedule]]:
    """(load multiple, schedule) of each step of a boundary: the first step (the trace at its
    time_scale, or Poisson at its rate) with its send offsets divided by step_factor^k (a
    Poisson stream compressed is Poisson at the multiplied rate). Each step holds the same
    requests; its phase is named after its multiple ("x1", "x1.5", ...)."""
    shape = spec.run if isinstance(spec.run, Boundary) else Boundary()
    base = _one_run(spec)
    out = []
    for k in range(shape.max_steps):
        m = shape.step_factor ** k
        name = f"x{m:.3g}"
        reqs = [r.model_copy(update={"at_s": (r.at_s or 0.0) / m, "phase": name})
                for r in base.requests]
        end = base.phases[0].end_s / m if base.phases else 0.0
        out.append((m, Schedule(kind="boundary", requests=reqs, concurrency=base.concurrency,
                                phases=[Phase(name=name, start_s=0.0, end_s=end)])))
    return out


def _boundary(spec: LoadSpec) -> Schedule:
    """The boundary's first step (`boundary_steps` gives them all)."""
    assert isinstance(spec.run, Boundary)
    first = spec.run.model_copy(update={"max_steps": 1})
    return boundary_steps(spec.model_copy(update={"run": first}))[0][1]


_REPLAYS: dict[str, Builder] = {"trace": trace_schedule, "requests": sent_schedule}
_ARRIVALS: dict[str, Builder] = {"rate": _rate, "burst": _burst, "closed_loop": _concurrency}
# A sweep's first schedule is its closed loop's; its levels are its caller's.
_SHAPES: dict[str, Builder] = {"single": _one_run, "sweep": _one_run, "soak": _soak,
                               "boundary": _boundary}
