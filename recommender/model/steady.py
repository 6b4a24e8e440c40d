"""The steady-state algebra of one fixed-length workload: continuous batching in closed form.

Owns `Prediction` and `steady_state` (closed loop at a concurrency, Poisson arrivals at a
rate, or offline at the memory / max_num_seqs ceiling), priced by the resolved deployment's
own step formula (`Resolved.step_seconds`, the record the simulator evaluates). `predict`
answers with the simulator (`recommender.sim.predict`); this closed form sets its closed-loop
users' start ramp (one request cycle), is the fit's Jacobian and gives quick what-ifs. No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import Field

from core.errors import UsageError
from core.load import DatasetLengths, FixedLengths, LoadSpec
from core.records import Record
from engines.config import EngineKind
from recommender.model.perf import Batch
from recommender.model.resolve import Resolved


class Prediction(Record):
    """Steady-state figures of one fixed-length workload; throughputs over all GPUs.

    Latencies are means. With fixed ISL/OSL every request in steady state sees the same
    batch, so p50 = mean; tails (p90/p99) need the simulator and are not given here.
    """

    engine: EngineKind = Field(description="Engine whose parameters were applied.")
    replicas: int = Field(ge=1, description="Scheduler replicas: DP ranks over all GPUs.")
    batch: float = Field(gt=0, description="Running sequences per replica in steady state.")
    batch_limit: str = Field(description="What set the batch: concurrency, kv_capacity, ...")
    kv_capacity_tokens: int = Field(ge=0, description="KV tokens one replica holds.")
    step_time_s: float = Field(gt=0, description="Mean engine step time in steady state.")
    output_throughput_tok_s: float = Field(ge=0, description="Output tokens/s, all GPUs.")
    total_throughput_tok_s: float = Field(ge=0, description="Input + output tokens/s, all GPUs.")
    request_throughput_rps: float = Field(ge=0, description="Completed requests/s, all GPUs.")
    ttft_s: float = Field(ge=0, description="Mean time to first token (queueing included).")
    tpot_s: float = Field(ge=0, description="Mean time per output token after the first.")
    itl_s: float = Field(
        ge=0, description="Mean gap between emissions: one step (= TPOT without speculation)."
    )
    e2e_s: float = Field(ge=0, description="Mean end-to-end latency per request.")


@dataclass(slots=True)
class _Steady:
    batch: float
    limit: str
    steps_per_request: float
    decode_steps: float  # steps after the first token: (osl − 1) / tokens per step
    step_s: float
    ttft_service_s: float
    burst_s: float  # prefill of b prompts at once, in full-budget steps (offline start)


def _spec(res: Resolved) -> tuple[float, float]:
    """(tokens emitted per decode step E, query tokens per decode q)."""
    spec = res.step.spec
    return (spec.tokens_per_step, spec.k + 1.0) if spec else (1.0, 1.0)


def _batch(res: Resolved, demand: float, isl: int, osl: int) -> tuple[float, str]:
    resident = isl + res.policy.resident_output_share * osl
    kv_cap = res.step.kv_capacity_tokens / resident
    if kv_cap < 1:
        raise UsageError(
            f"KV cache holds {res.step.kv_capacity_tokens} tokens per replica, less than one "
            f"{isl}+{osl}-token request; add GPUs, quantize, or shorten the request")
    limits = {"concurrency": demand, "kv_capacity": math.floor(kv_cap),
              "max_num_seqs": res.caps.max_running}
    limit = min(limits, key=lambda k: limits[k])
    return float(limits[limit]), limit


def _steady(res: Resolved, demand: float, *, isl: int, osl: int) -> _Steady:
    budget, chunked = res.caps.budget_tokens, res.caps.chunked_prefill
    b, limit = _batch(res, demand, isl, osl)
    # Each request holds its slot for max(1 + D, token-budget-bound) steps, D = (osl − 1)/E
    # decode steps (E tokens per step, each verifying q tokens): isl prefill tokens plus D·q
    # decode tokens share the per-step budget with the other b − 1.
    e, q = _spec(res)
    dsteps = (osl - 1) / e
    steps = max(1.0 + dsteps, b * (isl + dsteps * q) / budget)
    if steps > 1.0 + dsteps:
        limit = "token_budget"
    # Prefill comes in chunks of up to the budget left beside the decodes, so n_p of the S
    # steps carry a c_p-token chunk and the rest decode only; the step time is their mix.
    decodes = b * dsteps / steps
    c_p = max(1.0, min(budget - decodes * q, max(float(isl), b * isl / steps)))
    n_p = min(steps, b * isl / c_p)
    context = isl + osl / 2
    mixed = Batch(prefill_tokens=c_p, decode_seqs=decodes, decode_context=context,
                  prefill_context=isl / 2, prefill_seqs=c_p / isl)
    step_s = n_p / steps * res.step_seconds(mixed)
    if n_p < steps:
        pure = Batch(prefill_tokens=0.0, decode_seqs=decodes, decode_context=context)
        step_s += (1.0 - n_p / steps) * res.step_seconds(pure)
    chunk = float(isl) if not chunked else max(1.0, min(isl, budget - decodes * q))
    prefill_step = Batch(
        prefill_tokens=chunk, decode_seqs=max(b - 1, 0) * dsteps / (1.0 + dsteps),
        decode_context=context, prefill_context=isl / 2, prefill_seqs=1)
    ttft = math.ceil(isl / chunk) * res.step_seconds(prefill_step)
    full = Batch(prefill_tokens=float(budget), decode_seqs=0.0, decode_context=0.0,
                 prefill_context=isl / 2, prefill_seqs=budget / isl)
    burst = b * isl / budget * res.step_seconds(full)
    return _Steady(b, limit, steps, dsteps, step_s, ttft, burst)


def steady_state(res: Resolved, load: LoadSpec, *, replicas: int = 1) -> Prediction:
    """Steady-state serving of the resolved deployment under a fixed ISL/OSL `load` (dataset
    lengths: their means), on `replicas` scheduler replicas (DP ranks over all GPUs).

    Each running request holds a slot for S = max(1 + D, B·(isl + D·q)/budget) steps, so
    requests/s = replicas·B/(S·step), output tokens/s = requests/s·osl, TPOT = D·step/(osl−1)
    (= step/E with speculation), ITL = step. TTFT = prefill of one prompt (budget-sized
    chunks beside the running decodes) + the budget wait + queueing: closed loop above the
    ceiling waits (C − B)/requests/s (Little's law); offline, requests beyond the first B
    wait for a slot and the first B share one prefill burst; Poisson arrivals at rate R keep
    n = R·E2E in flight (`_open_loop_demand`), served as a closed loop of n. The per-request
    API time adds to TTFT and E2E; it and the closed-loop gap add to each closed-loop user's
    cycle when all users fit the batch.
    The ramp-up/drain of a finite offline run is ignored (makespan = N / requests/s).

    Raises:
        UsageError: a trace load, an offline load without num_requests, or a request
            larger than a replica's KV pool.
    """
    if not isinstance(load.lengths, FixedLengths | DatasetLengths) or load.arrival is None:
        raise UsageError("the steady-state model takes fixed lengths and an arrival process")
    isl, osl = load.lengths.input_tokens, load.lengths.output_tokens
    overhead = res.request_overhead_s
    concurrency = load.arrival.concurrency if load.arrival.kind == "closed_loop" else None
    rate = load.arrival.rate_rps / replicas if load.arrival.kind == "rate" else None
    demand = (concurrency if concurrency is not None
              else _open_loop_demand(res, rate, isl, osl, load.num_requests) * replicas
              if rate is not None else load.num_requests)
    if demand is None:
        raise UsageError("an offline load needs num_requests")
    s = _steady(res, demand / replicas, isl=isl, osl=osl)
    cycle_s = s.steps_per_request * s.step_s
    if concurrency is not None and concurrency / replicas <= s.batch:
        # each user idles the client's gap and the API time between requests
        cycle_s += overhead + res.closed_loop_gap_s
    rps_replica = s.batch / cycle_s if rate is None else min(rate, s.batch / cycle_s)
    ttft = s.ttft_service_s + max(0.0, s.steps_per_request - 1.0 - s.decode_steps) * s.step_s
    ttft += overhead + _queueing(s, demand / replicas, rps_replica,
                                 closed=concurrency is not None or rate is not None)
    e2e = ttft + s.decode_steps * s.step_s
    tpot = s.decode_steps * s.step_s / (osl - 1) if osl > 1 else s.step_s
    rps = rps_replica * replicas
    return Prediction(
        engine=res.config.engine, replicas=replicas, batch=s.batch, batch_limit=s.limit,
        kv_capacity_tokens=res.step.kv_capacity_tokens, step_time_s=s.step_s,
        output_throughput_tok_s=rps * osl, total_throughput_tok_s=rps * (isl + osl),
        request_throughput_rps=rps, ttft_s=ttft, tpot_s=tpot, itl_s=s.step_s, e2e_s=e2e,
    )


def _open_loop_demand(res: Resolved, rate: float, isl: int, osl: int,
                      num_requests: int | None) -> float:
    """Requests in flight per replica under Poisson arrivals at `rate` req/s: the fixed point
    n = rate · E2E(n) of Little's law, E2E priced at a batch of n (geometric damping, 40
    rounds). Above the replica's ceiling μ req/s a finite run's queue never drains: request
    k of N waits k·(1/μ − 1/rate), so the mean wait is N/2·(1/μ − 1/rate) and the batch plus
    μ times that wait are in flight (N: the run's requests, else ten batches)."""
    full = _steady(res, math.inf, isl=isl, osl=osl)
    ceiling = full.batch / (full.steps_per_request * full.step_s)
    if rate >= ceiling:
        total = float(num_requests) if num_requests else 10.0 * full.batch
        return full.batch + total / 2 * (1.0 - ceiling / rate)
    n = 1.0
    for _ in range(40):
        s = _steady(res, n, isl=isl, osl=osl)
        e2e = s.ttft_service_s + res.request_overhead_s + s.steps_per_request * s.step_s
        n = math.sqrt(n * max(rate * e2e, 1e-9))
    return n


def _queueing(s: _Steady, n: float, rps: float, *, closed: bool) -> float:
    """Mean wait before service: Little's law above the ceiling (closed loop); offline, the
    slots' queue and the first wave's shared prefill burst."""
    if closed:
        return max(0.0, n - s.batch) / rps
    waits = max(0.0, n - s.batch) * (max(0.0, n - s.batch) + 1) / (2 * rps)
    first_wave = min(n, s.batch) * 0.5 * s.burst_s
    return (waits + first_wave) / n


__all__ = ["Prediction", "steady_state"]
