"""The `core.load.LoadSpec`s the load-generator and benchmark tests send, one helper per `bench
--workload` name (`runners.benchmark.from_options` builds the same records from the CLI's
options). Fixed lengths default to 4 prompt and 4 output tokens."""

from __future__ import annotations

from core.load import Burst, ClosedLoop, FixedLengths, LoadSpec, Rate, TraceWindow
from core.run_shape import Boundary, Single, Soak, Sweep


def _fixed(input_tokens: int, output_tokens: int) -> FixedLengths:
    return FixedLengths(input_tokens=input_tokens, output_tokens=output_tokens)


def poisson(rate_rps: float, *, num_requests: int | None = None,
            duration_s: float | None = None, max_in_flight: int | None = None,
            input_tokens: int = 4, output_tokens: int = 4, seed: int = 0) -> LoadSpec:
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens), arrival=Rate(rate_rps=rate_rps),
                    num_requests=num_requests, duration_s=duration_s,
                    max_in_flight=max_in_flight, seed=seed)


def gamma(rate_rps: float, cv: float, *, num_requests: int | None = None,
          duration_s: float | None = None, input_tokens: int = 4, output_tokens: int = 4,
          seed: int = 0) -> LoadSpec:
    arrival = Rate(rate_rps=rate_rps, process="gamma", cv=cv)
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens), arrival=arrival,
                    num_requests=num_requests, duration_s=duration_s, seed=seed)


def closed(concurrency: int, *, num_requests: int | None = None,
           duration_s: float | None = None, input_tokens: int = 4, output_tokens: int = 4,
           seed: int = 0) -> LoadSpec:
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens),
                    arrival=ClosedLoop(concurrency=concurrency), num_requests=num_requests,
                    duration_s=duration_s, seed=seed)


def sweep(max_concurrency: int, *, num_requests: int | None = None, input_tokens: int = 4,
          output_tokens: int = 4, seed: int = 0) -> LoadSpec:
    """The closed loop at 1, 2, 4, … up to `max_concurrency`."""
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens),
                    arrival=ClosedLoop(concurrency=1), num_requests=num_requests,
                    run=Sweep(max_concurrency=max_concurrency), seed=seed)


def burst(base_rate_rps: float, peak_rate_rps: float, steady_s: float, burst_s: float, *,
          input_tokens: int = 4, output_tokens: int = 4, seed: int = 0) -> LoadSpec:
    arrival = Burst(base_rate_rps=base_rate_rps, peak_rate_rps=peak_rate_rps,
                    steady_s=steady_s, burst_s=burst_s)
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens), arrival=arrival, seed=seed)


def soak(window_s: float, duration_s: float, *, rate_rps: float | None = None,
         concurrency: int | None = None, input_tokens: int = 4, output_tokens: int = 4,
         seed: int = 0) -> LoadSpec:
    """A Poisson rate or a concurrency (exactly one) for `duration_s`, in windows."""
    arrival = Rate(rate_rps=rate_rps) if rate_rps is not None else ClosedLoop(
        concurrency=concurrency or 0)
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens), arrival=arrival,
                    duration_s=duration_s, run=Soak(window_s=window_s), seed=seed)


def boundary(rate_rps: float, *, num_requests: int | None = None,
             duration_s: float | None = None, step_factor: float = 1.5, max_steps: int = 8,
             input_tokens: int = 4, output_tokens: int = 4, seed: int = 0) -> LoadSpec:
    """Poisson at `rate_rps`, replayed at increasing compression."""
    return LoadSpec(lengths=_fixed(input_tokens, output_tokens), arrival=Rate(rate_rps=rate_rps),
                    num_requests=num_requests, duration_s=duration_s,
                    run=Boundary(step_factor=step_factor, max_steps=max_steps), seed=seed)


def trace(*, num_requests: int | None = None, max_in_flight: int | None = None,
          run: Boundary | None = None, **window: object) -> LoadSpec:
    """A trace window (`window`: `TraceWindow`'s fields) at its own arrivals."""
    return LoadSpec(lengths=TraceWindow.model_validate(window), num_requests=num_requests,
                    max_in_flight=max_in_flight, run=run or Single())
