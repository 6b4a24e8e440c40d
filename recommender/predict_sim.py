"""`predict` through the simulator: one fixed-length workload, with latency tails.

Owns `simulate_load` (a fixed ISL/OSL workload — closed loop at a concurrency, Poisson at a
rate (seeded), or offline N queued at t = 0 — over `gpus / tp` data-parallel replicas, each
simulated by `recommender.simulator`) and `load_summary` (the DESIGN §2.4 `predict --json`
view). The steady-state algebra (`perf.predict`) stays for calibration; this is what the CLI
answers with. No I/O.

Closed loop: users start evenly over one request cycle (the steady-state E2E of
`perf.predict`), as real clients drift apart; started together, fixed-length requests would
stay in lock-step waves (all prefills in one step, then only decodes).

Replicas: the load splits evenly (closed loop and offline: users / requests differ by at
most one between replicas, so at most two distinct replica loads are simulated; Poisson: a
split Poisson stream is Poisson at rate/R, so one replica is simulated and scaled).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import UsageError
from engines.config import EngineConfig, EngineKind, SpeculativeConfig
from recommender import perf
from recommender.simulator import (
    LatencyStats,
    SimOptions,
    SimRequests,
    SimResult,
    histogram_stats,
    latency_stats,
    simulate,
)
from recommender.specs import GPU, ModelSpec

# Requests simulated when the caller gives no count: closed loop CLOSED_PER_USER per user
# (ramp-up and drain then cost a few % of the throughput, as in a real finite benchmark),
# at least MIN_REQUESTS in all; rate mode RATE_DEFAULT_REQUESTS.
CLOSED_PER_USER = 10
MIN_REQUESTS = 200
RATE_DEFAULT_REQUESTS = 2000


class LoadPrediction(BaseModel):
    """Simulated serving of one fixed-length workload; throughputs over all GPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: EngineKind = Field(description="Engine whose parameters were applied.")
    mode: str = Field(description="closed_loop, rate or offline.")
    replicas: int = Field(ge=1, description="Data-parallel copies: gpus / tp.")
    requests: int = Field(ge=1, description="Requests simulated over all replicas.")
    completed: int = Field(ge=0, description="Requests served to the end.")
    makespan_s: float = Field(ge=0, description="Longest replica's first arrival to last token.")
    output_throughput_tok_s: float = Field(ge=0, description="Output tokens/s, all GPUs.")
    total_throughput_tok_s: float = Field(ge=0, description="Input + output tokens/s, all GPUs.")
    request_throughput_rps: float = Field(ge=0, description="Completed requests/s, all GPUs.")
    ttft_s: LatencyStats = Field(description="Time to first token, per request.")
    tpot_s: LatencyStats = Field(description="(E2E − TTFT)/(osl − 1), per request.")
    itl_s: LatencyStats = Field(description="Gaps between emissions, pooled.")
    e2e_s: LatencyStats = Field(description="Send to last token, per request.")
    itl_max_s: float = Field(description="Largest gap between two emissions of any request.")
    kv_capacity_tokens: int = Field(ge=0, description="KV tokens one replica holds.")
    preemptions: int = Field(ge=0, description="Recompute preemptions, all replicas.")


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    """[(per-replica amount, replicas with it)] for `total` spread over `parts` evenly."""
    lo, extra = divmod(total, parts)
    groups = [(lo + 1, extra), (lo, parts - extra)]
    return [(amount, count) for amount, count in groups if amount > 0 and count > 0]


def _groups(
    replicas: int, concurrency: int | None, rate_rps: float | None, num_requests: int | None,
    seed: int,
) -> tuple[str, list[tuple[np.ndarray, SimOptions, int]]]:
    """(mode, [(send times of one replica's requests, options, replicas running it)])."""
    if concurrency is not None:
        out = []
        for users, count in _split(concurrency, replicas):
            n = (num_requests * users // concurrency if num_requests
                 else max(CLOSED_PER_USER * users, MIN_REQUESTS))
            options = SimOptions(arrival="closed_loop", concurrency=users)
            out.append((np.zeros(max(n, users)), options, count))
        return "closed_loop", out
    if rate_rps is not None:
        n = max(1, math.ceil((num_requests or RATE_DEFAULT_REQUESTS) / replicas))
        gaps = np.random.default_rng(seed).exponential(replicas / rate_rps, n)
        return "rate", [(np.cumsum(gaps) - gaps[0], SimOptions(), replicas)]
    assert num_requests is not None
    return "offline", [(np.zeros(n), SimOptions(arrival="offline"), c)
                       for n, c in _split(num_requests, replicas)]


def _check(isl: int, osl: int, loads: tuple, gpus: int, tp: int) -> None:
    if isl < 1 or osl < 1:
        raise UsageError(f"isl and osl must be >= 1, got {isl} and {osl}")
    if sum(x is not None for x in loads) != 1:
        raise UsageError("give exactly one of concurrency, rate or offline num_requests")
    concurrency, rate_rps, num_requests = loads
    if any(x is not None and x < 1 for x in (concurrency, num_requests)):
        raise UsageError("concurrency and num_requests must be >= 1")
    if rate_rps is not None and not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise UsageError(f"rate must be a positive number of requests/s, got {rate_rps}")
    if gpus % tp:
        raise UsageError(f"gpus={gpus} is not a multiple of tp={tp}")


def _combine(runs: list[tuple[SimResult, int]], pick: str) -> LatencyStats:
    """Per-request LatencyStats over all replicas (each run counted `count` times)."""
    return latency_stats(np.concatenate([np.tile(getattr(r, pick), c) for r, c in runs]))


def simulate_load(
    engine: EngineKind, model: ModelSpec, gpu: GPU, *, isl: int, osl: int,
    concurrency: int | None = None, rate_rps: float | None = None,
    num_requests: int | None = None, offline: bool = False, gpus: int | None = None,
    tp: int = 1, precision: str = "bf16", kv_cache_dtype: str = "auto",
    max_num_seqs: int | None = None, max_batched_tokens: int | None = None,
    gpu_memory_fraction: float | None = None, speculative: SpeculativeConfig | None = None,
    spec_acceptance: float | None = None, params: perf.PerfParams | None = None, seed: int = 0,
) -> LoadPrediction:
    """Simulate a fixed ISL/OSL workload on `gpus` GPUs (replicas of `tp`) and summarise it.

    Exactly one load: `concurrency` (closed loop; `num_requests` in all, default
    max(10·C, 200)), `rate_rps` (Poisson, seeded; `num_requests`, default 2000) or
    `offline=True` with `num_requests` queued at t = 0.

    Raises:
        UsageError: bad lengths or load, gpus not a multiple of tp, an unknown precision,
            a config that does not fit, or a request larger than the KV pool.
    """
    gpus = gpus or tp
    loads = (concurrency, rate_rps, num_requests if offline else None)
    _check(isl, osl, loads, gpus, tp)
    if precision not in perf.PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; use one of "
                         f"{', '.join(perf.PRECISIONS)}")
    _, budget, chunked = perf._engine_defaults(engine, gpu)
    if max_batched_tokens is None and not chunked and budget < isl + osl:
        # Unchunked prefill needs the whole prompt (and a preempted request's recompute) in
        # one step; left unset, the budget is sized to the workload (as trtllm-bench does).
        max_batched_tokens = isl + osl
    try:
        config = EngineConfig(
            engine=engine, model=model.name, tp=tp, max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens, gpu_memory_fraction=gpu_memory_fraction,
            kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
            weight_quantization=perf.PRECISIONS[precision],  # type: ignore[arg-type]
            speculative=speculative,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise UsageError(f"{where}: {err['msg']}") from exc
    fitted = params or perf.load_params()
    replicas = gpus // tp
    mode, groups = _groups(replicas, concurrency, rate_rps, num_requests, seed)
    ramp = 0.0
    if concurrency is not None:
        ramp = perf.predict(
            engine, model, gpu, isl=isl, osl=osl, concurrency=concurrency, gpus=gpus, tp=tp,
            precision=precision, kv_cache_dtype=kv_cache_dtype, max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens, gpu_memory_fraction=gpu_memory_fraction,
            params=fitted, speculative=speculative, spec_acceptance=spec_acceptance,
        ).e2e_s
    runs: list[tuple[SimResult, int]] = []
    for arrival, options, count in groups:
        req = SimRequests(arrival, np.full(len(arrival), isl), np.full(len(arrival), osl))
        opts = options.model_copy(
            update={"spec_acceptance": spec_acceptance, "closed_loop_ramp_s": ramp})
        res = simulate(req, config, gpu, model, params=fitted, options=opts)
        if res.summary.rejected:
            raise UsageError(
                f"a {isl}+{osl}-token request does not fit this replica's KV cache or "
                "max_model_len; add GPUs, quantize, or shorten the request")
        runs.append((res, count))
    return _prediction(engine, mode, replicas, runs, lengths=(isl, osl))


def _prediction(
    engine: EngineKind, mode: str, replicas: int, runs: list[tuple[SimResult, int]],
    *, lengths: tuple[int, int],
) -> LoadPrediction:
    isl, osl = lengths
    rps = sum(r.summary.request_throughput_rps * c for r, c in runs)
    hist = sum(r.itl_histogram * c for r, c in runs)  # type: ignore[operator]
    hist[-1] = max(r.itl_histogram[-1] for r, _ in runs)  # type: ignore[index]
    itl, itl_max = histogram_stats(hist)
    return LoadPrediction(
        engine=engine, mode=mode, replicas=replicas,
        requests=sum(len(r.ttft_s) * c for r, c in runs),
        completed=sum(r.summary.completed * c for r, c in runs),
        makespan_s=max(r.summary.makespan_s for r, _ in runs),
        output_throughput_tok_s=rps * osl, total_throughput_tok_s=rps * (isl + osl),
        request_throughput_rps=rps,
        ttft_s=_combine(runs, "ttft_s"), tpot_s=_combine(runs, "tpot_s"), itl_s=itl,
        e2e_s=_combine(runs, "e2e_s"), itl_max_s=0.0 if math.isnan(itl_max) else itl_max,
        kv_capacity_tokens=runs[0][0].summary.kv_capacity_blocks * SimOptions().kv_block_tokens,
        preemptions=sum(r.summary.preemptions * c for r, c in runs),
    )


def load_summary(prediction: LoadPrediction) -> dict[str, object]:
    """The `predict --json` view (DESIGN §2.4): throughputs, latencies in ms
    {mean, p50, p90, p95, p99}, and context figures."""
    def ms(stats: LatencyStats) -> dict[str, float | None]:
        return {k: None if math.isnan(v) else v * 1e3
                for k, v in stats.model_dump().items()}

    return {
        "output_throughput_tok_s": prediction.output_throughput_tok_s,
        "total_throughput_tok_s": prediction.total_throughput_tok_s,
        "request_throughput_rps": prediction.request_throughput_rps,
        "ttft_ms": ms(prediction.ttft_s),
        "tpot_ms": ms(prediction.tpot_s),
        "itl_ms": ms(prediction.itl_s),
        "e2e_ms": ms(prediction.e2e_s),
        "itl_max_ms": prediction.itl_max_s * 1e3,
        "mode": prediction.mode,
        "requests": prediction.requests,
        "replicas": prediction.replicas,
        "kv_capacity_tokens": prediction.kv_capacity_tokens,
        "preemptions": prediction.preemptions,
    }
