"""Workload kinds: what to send and when. Each kind turns a `WorkloadSpec` (`workload_spec`)
into a `Schedule` of requests (`schedule`).

Each kind is a plug-in in `WORKLOADS` (kind -> builder). Open-loop kinds (trace, poisson, gamma,
burst, soak at a rate) give every request an arrival offset `at_s`; closed-loop kinds
(concurrency, soak at a concurrency) give `at_s=None` and a concurrency limit, and when they are
bounded by time their request list is a pool the load generator cycles through. The concurrency
sweep is `concurrency` run at increasing levels by its caller; the boundary is a trace (or Poisson)
run at increasing time compression (`boundary_steps`), stopped by its caller's stop rule
(`runners.benchmark.boundary`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from core.arrivals import Process, exact_count_poisson, renewal_times
from core.errors import RunnerError
from runners.load.schedule import Phase, Schedule, ScheduledRequest
from runners.load.workload_spec import DEFAULT_MAX_STEPS, DEFAULT_STEP_FACTOR, WorkloadSpec

# Closed-loop runs bounded by time reuse this many distinct request records (prompts still
# differ: they are built from the sent index, not the pool slot).
POOL_SIZE = 4096


Builder = Callable[[WorkloadSpec], Schedule]


def build_schedule(spec: WorkloadSpec) -> Schedule:
    """The schedule of `spec` (deterministic for a given seed)."""
    return WORKLOADS[spec.kind](spec)


def _synthetic(spec: WorkloadSpec, at: Sequence[float | None],
               phases: list[str]) -> list[ScheduledRequest]:
    p, o = spec.prompt_tokens, spec.output_tokens
    return [ScheduledRequest.model_construct(index=i, at_s=t, phase=ph, input_tokens=p,
                                             output_tokens=o, block_hashes=None, block_size=None)
            for i, (t, ph) in enumerate(zip(at, phases, strict=True))]


def _renewal(spec: WorkloadSpec, process: Process, cv: float = 1.0) -> Schedule:
    """Open-loop arrivals at renewal times (`core.arrivals`), cut at the duration and/or the
    request count."""
    assert spec.rate_rps is not None  # the spec's validator requires it for these kinds
    at = renewal_times(np.random.default_rng(spec.seed), spec.rate_rps,
                       count=spec.num_requests, end_s=spec.duration_s, process=process, cv=cv)
    return _one_phase(spec, at)


def _one_phase(spec: WorkloadSpec, at: np.ndarray) -> Schedule:
    """Open-loop requests at offsets `at`, in one phase named after the kind that ends at the
    duration (else at the last arrival)."""
    end = spec.duration_s if spec.duration_s is not None else float(at[-1]) if len(at) else 0.0
    reqs = _synthetic(spec, at.tolist(), [spec.kind] * len(at))
    return Schedule(kind=spec.kind, requests=reqs, concurrency=spec.concurrency,
                    phases=[Phase(name=spec.kind, start_s=0.0, end_s=end)])


def _poisson(spec: WorkloadSpec) -> Schedule:
    """With a duration: exactly rate × duration arrivals at Poisson times
    (`core.arrivals.exact_count_poisson`). With a request count only: exponential gaps with
    mean 1/rate, arrivals at their sums."""
    if spec.duration_s is None:
        return _renewal(spec, "poisson")
    assert spec.rate_rps is not None
    at = exact_count_poisson(np.random.default_rng(spec.seed), spec.rate_rps, 0.0,
                             spec.duration_s)
    return _one_phase(spec, at[:spec.num_requests])


def _gamma(spec: WorkloadSpec) -> Schedule:
    """Gamma gaps with mean 1/rate and coefficient of variation gamma_cv (shape 1/cv²)."""
    assert spec.gamma_cv is not None
    return _renewal(spec, "gamma", spec.gamma_cv)


def _closed(spec: WorkloadSpec, phases: list[Phase]) -> Schedule:
    n = spec.num_requests if spec.num_requests is not None else POOL_SIZE
    reqs = _synthetic(spec, [None] * n, [phases[0].name if phases else ""] * n)
    return Schedule(kind=spec.kind, requests=reqs, concurrency=spec.concurrency,
                    duration_s=spec.duration_s, cycle=spec.num_requests is None, phases=phases)


def _concurrency(spec: WorkloadSpec) -> Schedule:
    """Closed loop: `concurrency` requests in flight, each replaced as it finishes."""
    end = spec.duration_s if spec.duration_s is not None else float("inf")
    return _closed(spec, [Phase(name="concurrency", start_s=0.0, end_s=end)])


def _piecewise_poisson(spec: WorkloadSpec, pieces: list[tuple[Phase, float]]) -> Schedule:
    rng = np.random.default_rng(spec.seed)
    at: list[float] = []
    names: list[str] = []
    for phase, rate in pieces:
        got = exact_count_poisson(rng, rate, phase.start_s, phase.end_s)
        at += got.tolist()
        names += [phase.name] * len(got)
    return Schedule(kind=spec.kind, requests=_synthetic(spec, at, names),
                    concurrency=spec.concurrency, phases=[p for p, _ in pieces])


def _burst(spec: WorkloadSpec) -> Schedule:
    """Poisson at base rate for steady_s, at peak rate for burst_s, at base again for steady_s."""
    s, b = spec.steady_s, spec.burst_s
    base, peak = spec.base_rate_rps, spec.peak_rate_rps
    assert s is not None and b is not None and base is not None and peak is not None
    return _piecewise_poisson(spec, [
        (Phase(name="steady", start_s=0.0, end_s=s), base),
        (Phase(name="burst", start_s=s, end_s=s + b), peak),
        (Phase(name="recovery", start_s=s + b, end_s=2 * s + b), base),
    ])


def _soak(spec: WorkloadSpec) -> Schedule:
    """A long steady load (rate or concurrency) split into windows `w0, w1, …` to see drift."""
    duration, window = spec.duration_s, spec.window_s
    assert duration is not None and window is not None  # the spec's validator requires them
    n = int(np.ceil(duration / window))
    phases = [Phase(name=f"w{k}", start_s=k * window, end_s=min((k + 1) * window, duration))
              for k in range(n)]
    if spec.rate_rps is None:
        return _closed(spec, phases)
    return _piecewise_poisson(spec, [(p, spec.rate_rps) for p in phases])


def _trace(spec: WorkloadSpec) -> Schedule:
    """The canonical `requests` table, windowed, time-scaled, with lengths capped if asked."""
    rows = _trace_rows(spec)
    reqs = []
    for i, (arrival, trace_in, trace_out, hashes, bsize) in enumerate(rows):
        n_in = spec.prompt_tokens or max(1, int(trace_in or 1))
        n_out = spec.output_tokens or max(1, int(trace_out or 1))
        if spec.max_prompt_tokens:
            n_in = min(n_in, spec.max_prompt_tokens)
        if spec.max_output_tokens:
            n_out = min(n_out, spec.max_output_tokens)
        reqs.append(ScheduledRequest.model_construct(
            index=i, at_s=(arrival - spec.start_s) * spec.time_scale, phase="trace",
            input_tokens=n_in, output_tokens=n_out,
            block_hashes=list(hashes) if hashes and bsize else None,
            block_size=int(bsize) if hashes and bsize else None))
    if not reqs:
        raise RunnerError("the trace window holds no requests: check start_s and duration_s")
    last = reqs[-1].at_s
    assert last is not None  # trace requests are open loop
    end = last if spec.duration_s is None else spec.duration_s * spec.time_scale
    return Schedule(kind="trace", requests=reqs, concurrency=spec.concurrency,
                    phases=[Phase(name="trace", start_s=0.0, end_s=end)])


def _trace_rows(spec: WorkloadSpec) -> list[tuple[Any, ...]]:
    from profiler.ingestion.ingest import ingest
    from profiler.workspace import Workspace

    ws = Workspace.resolve(spec.workspace)
    if spec.trace_path is not None:
        ingest(spec.trace_path, ws)
    end = float("inf") if spec.duration_s is None else spec.start_s + spec.duration_s
    limit = spec.num_requests if spec.num_requests is not None else 2**62
    with ws.connect(read_only=True) as con:
        return con.execute(
            'SELECT arrival_s, input_tokens, output_tokens, block_hashes, block_size '
            'FROM "requests" WHERE arrival_s >= ? AND arrival_s < ? '
            'ORDER BY arrival_s, request_id LIMIT ?',
            [spec.start_s, end, limit]).fetchall()


def boundary_steps(spec: WorkloadSpec) -> list[tuple[float, Schedule]]:
    """(load multiple, schedule) of each step of a boundary: the first step (the trace at its
    time_scale, or Poisson at rate_rps) with its send offsets divided by step_factor^k (a
    Poisson stream compressed is Poisson at the multiplied rate). Each step holds the same
    requests; its phase is named after its multiple ("x1", "x1.5", ...)."""
    base = _boundary_base(spec)
    factor = spec.step_factor or DEFAULT_STEP_FACTOR
    out = []
    for k in range(spec.max_steps or DEFAULT_MAX_STEPS):
        m = factor ** k
        name = f"x{m:.3g}"
        reqs = [r.model_copy(update={"at_s": (r.at_s or 0.0) / m, "phase": name})
                for r in base.requests]
        end = base.phases[0].end_s / m if base.phases else 0.0
        out.append((m, Schedule(kind="boundary", requests=reqs, concurrency=base.concurrency,
                                phases=[Phase(name=name, start_s=0.0, end_s=end)])))
    return out


def _boundary_base(spec: WorkloadSpec) -> Schedule:
    kind = "trace" if spec.trace_path is not None or spec.workspace is not None else "poisson"
    return WORKLOADS[kind](spec.model_copy(update={"kind": kind}))


def _boundary(spec: WorkloadSpec) -> Schedule:
    """The boundary's first step (`boundary_steps` gives them all)."""
    return boundary_steps(spec.model_copy(update={"max_steps": 1}))[0][1]


WORKLOADS: dict[str, Builder] = {
    "trace": _trace,
    "poisson": _poisson,
    "gamma": _gamma,
    "concurrency": _concurrency,
    "burst": _burst,
    "soak": _soak,
    "boundary": _boundary,
}

# What `bench` runs: every workload kind, and the sweep (the `concurrency` kind at 1, 2, 4, …
# up to a cap, run by runners.benchmark.bench until past the knee). Front ends list these.
BENCH_KINDS: tuple[str, ...] = (*WORKLOADS, "sweep")
