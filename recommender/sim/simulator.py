"""Iteration-level simulation of one engine replica serving the user's own requests.

Owns `simulate` (requests + EngineConfig + GPU + model → per-request TTFT/TPOT/E2E, summary,
throughput, goodput, time series; the records live in `recommender.sim.result`) and the
loop's named integer settings (`KernelSettings`). The deployment is resolved once
(`recommender.model.resolve`: caps, policy, memory plan, the step formula's coefficients); the
loop itself lives in `recommender.sim.kernel`, the rules by which requests a replica can never
serve are rejected in `recommender.sim.refusals`. No I/O.

Scheduler (vLLM V1-like, one iteration per step):
- Running requests first, in admission order: each gets min(tokens left to compute, budget
  left) tokens (a decode is 1 token; a partial prefill continues with the next chunk).
  Without chunked prefill, a prefill runs only whole.
- KV in blocks: a request holds ceil(tokens / block) private blocks plus refs on cached
  prefix blocks. When a running request needs a block and none is free (after evicting
  unreferenced cached blocks, LRU), the most recently admitted running request is preempted
  (recompute: its KV is freed, it returns to the front of the waiting queue, and later
  recomputes prompt + already generated tokens; emitted tokens are not re-emitted).
- Then, if nothing was preempted this step, waiting requests are admitted in FCFS order while
  running < max_num_seqs, budget is left and their first chunk's blocks fit (under the
  engine's `reserve_full` policy, TensorRT-LLM's GUARANTEED_NO_EVICT: the blocks of the
  whole prompt + output, held to the end, so it never preempts; `recommender.sim.policies`);
  admission
  skips the leading run of the prompt's blocks that are cached (never the whole prompt:
  the last token is always computed), as vLLM does.
- A step that brings a request's computed tokens up to its length samples one token; the
  first such step is its first token. A prompt's full blocks enter the cache as soon as
  the step that computed them ends (vLLM caches each full block when computed; SGLang
  inserts a chunked prompt's prefix after each chunk), so a request preempted mid-prompt
  resumes from its cached blocks unless they were evicted meanwhile; on finish/preemption
  they are released last block first, so a prefix outlives its tail (DESIGN §2.2). With
  prefix caching on and no block hashes, each prompt gets private blocks of
  OWN_BLOCK_TOKENS (no sharing, only that resumption).
- A request enters the engine the engine's request_overhead_s (API time) after it is sent;
  its latencies count from the send; a closed-loop user's next request is sent the engine's
  closed_loop_gap_s (the client's turnaround) after the finish.
- Step time = the step formula (`perf`) of the batch: prefill tokens, decodes, summed decode
  contexts, summed causal prefill context (chunk tokens × (start + chunk/2)), prompts
  sampled; its kernel part from the deployment's step-time provider (the roofline's closed
  form, or a measured provider's table), so the loop never calls Python.
- Attention data parallelism (`config.dp`): one replica is one DP rank; its step is priced
  with every rank's tokens reaching the experts (the caller splits the load over ranks).
- Speculative decoding (config.speculative): a decode verifies k + 1 tokens (budget, KV
  lookahead, and the draft in the step formula) and emits the expected
  (1 − a^(k+1))/(1 − a) tokens per step as a deterministic fluid (see `kernel.loop.run`).
Deviations: no CUDA-graph padding, no long-prefill threshold or priority scheduling,
no random acceptance (expected tokens per step), no async scheduling; blocks of generated
tokens are not cached; KV is counted in gcd(trace block, engine block)
units when the two differ; the time series is per step, decimated to at most 4096 samples,
then optionally averaged per interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from core.errors import UsageError
from core.figures import latency_of, meets_slos
from core.records import Record
from engines.config import EngineConfig
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import scheduler_caps
from recommender.model.params import EngineParams, PerfParams, load_params
from recommender.model.resolve import Harness, resolve
from recommender.sim.policies import SchedulerPolicy
from recommender.sim.refusals import servable
from recommender.sim.result import (
    SimResult,
    SimSummary,
    histogram_max,
    histogram_stats,
    series,
)

# Without block hashes a prompt's own blocks are cached in units of this many tokens (a
# multiple of the KV unit): coarse enough to keep the id arrays small on 100 k-request
# traces; a preempted request recomputes at most one such partial unit.
OWN_BLOCK_TOKENS = 256

ArrivalMode = Literal["trace", "offline", "closed_loop"]


@dataclass(slots=True)
class SimRequests:
    """Requests as arrays (the canonical `requests` table's columns), in any order.

    block_hashes/block_offsets: all requests' prompt block hashes, flat, request i owning
    block_hashes[block_offsets[i]:block_offsets[i+1]] (chained: equal hash ⇒ equal prefix);
    None = no prefix information.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    block_hashes: np.ndarray | None = None
    block_offsets: np.ndarray | None = None
    block_size: int | None = None


class SimOptions(Record):
    """How requests arrive and what to report."""

    arrival: ArrivalMode = Field(
        default="trace",
        description="trace: arrival_s × time_scale; offline: all at t = 0; "
        "closed_loop: `concurrency` in flight, each finish releases the next request.",
    )
    time_scale: float = Field(
        default=1.0,
        gt=0,
        description="Trace mode: arrival_s is multiplied by this (0.5 replays twice as fast).",
    )
    concurrency: int | None = Field(default=None, ge=1, description="Closed-loop users.")
    closed_loop_ramp_s: float = Field(
        default=0.0,
        ge=0,
        description="Closed loop: users send their first request evenly over [0, ramp) "
        "instead of all at t = 0 (fixed lengths otherwise stay in lock-step waves).",
    )
    batching: Literal["continuous", "static"] = Field(
        default="continuous",
        description="static: a new batch starts only when the running "
        "batch has fully finished (the pre-vLLM baseline, DESIGN §4.1).",
    )
    kv_block_tokens: int = Field(default=16, ge=1, description="Tokens per KV block.")
    harness: Harness = Field(
        default="served", description="How the load reaches the engine: through its API "
        "server, or in-process (no per-request API time): `recommender.model.resolve.HARNESSES`.")
    engine_version: str | None = Field(
        default=None, description="The engine release measured (its memory-fraction default "
        "where it differs); None = the plug-in's release.")
    slo_ttft_s: float | None = Field(default=None, gt=0, description="TTFT SLO per request.")
    slo_tpot_s: float | None = Field(default=None, gt=0, description="TPOT SLO per request.")
    spec_acceptance: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Per-token acceptance rate of speculative drafts (config.speculative); "
        "None = spec_acceptance_by_method's entry, else the method's default "
        "(recommender.model.speculative.DEFAULT_ACCEPTANCE).",
    )
    spec_acceptance_by_method: dict[str, float] = Field(
        default_factory=dict,
        description="Per-token acceptance measured for a speculative method on this "
        "workload (e.g. the trace's ngram replay), by method; used when spec_acceptance is None.",
    )
    series_interval_s: float | None = Field(
        default=None,
        gt=0,
        description="Average the time series over windows of this length; "
        "None = per-step samples (decimated to at most 4096).",
    )


@dataclass(slots=True)
class _Prepared:
    arrival: np.ndarray
    inp: np.ndarray
    out: np.ndarray
    hoff: np.ndarray
    hid: np.ndarray
    nfull: np.ndarray
    n_ids: int
    hash_block: int


def _validate(req: SimRequests) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = np.asarray(req.arrival_s, dtype=np.float64)
    inp = np.asarray(req.input_tokens, dtype=np.int64)
    out = np.asarray(req.output_tokens, dtype=np.int64)
    if not (arr.ndim == inp.ndim == out.ndim == 1 and len(arr) == len(inp) == len(out)):
        raise UsageError("arrival_s, input_tokens and output_tokens must be 1-D, equal length")
    if len(arr) == 0:
        raise UsageError("no requests to simulate")
    if not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise UsageError("arrival_s must be finite and >= 0")
    if inp.min() < 1 or out.min() < 1:
        raise UsageError("input_tokens and output_tokens must be >= 1 (filter failed rows)")
    return arr, inp, out


def _prepare(
    req: SimRequests, order: np.ndarray, arr: np.ndarray, use_hashes: bool, own_block: int
) -> _Prepared:
    """The kernel's arrays in serving order. own_block > 0 (prefix caching on, no hashes):
    each request's prompt gets private block ids of own_block tokens, so a request preempted
    mid-prompt finds its own computed blocks cached when readmitted, as vLLM's and SGLang's
    prefix caches give it (they cache a prompt's full blocks chunk by chunk)."""
    inp = np.ascontiguousarray(req.input_tokens[order], dtype=np.int64)
    out = np.ascontiguousarray(req.output_tokens[order], dtype=np.int64)
    n = len(order)
    if own_block > 0 and not use_hashes:
        nfull = inp // own_block
        hoff = np.zeros(n, np.int64)
        np.cumsum(nfull[:-1], out=hoff[1:])
        total = int(nfull.sum())
        hid = np.arange(max(total, 1), dtype=np.int32)
        return _Prepared(arr, inp, out, hoff, hid, nfull, max(total, 1), own_block)
    if not use_hashes or req.block_hashes is None or req.block_offsets is None:
        return _Prepared(
            arr, inp, out, np.zeros(n, np.int64), np.zeros(1, np.int32), np.zeros(n, np.int64), 1, 0
        )
    offsets = np.asarray(req.block_offsets, dtype=np.int64)
    # Offsets index all requests (rejected ones included); `order` picks the served ones.
    if len(offsets) != len(req.input_tokens) + 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise UsageError("block_offsets must have n+1 non-decreasing entries starting at 0")
    if not req.block_size or req.block_size < 1:
        raise UsageError("block_size must be >= 1 when block_hashes are given")
    hashes = np.ascontiguousarray(req.block_hashes, dtype=np.uint64)
    if len(hashes) != offsets[-1]:
        raise UsageError(f"block_offsets end at {offsets[-1]}, but {len(hashes)} hashes given")
    from profiler.analysis.prefix import dense_ids

    ids, n_unique, _ = dense_ids(hashes, np.ascontiguousarray(offsets))
    # The kernel reads request r's blocks at hid[hoff[r]:hoff[r] + nfull[r]]: starts only,
    # so the flat hash array keeps its input order.
    hoff = np.ascontiguousarray(offsets[:-1][order])
    nfull = np.minimum(np.diff(offsets)[order], inp // req.block_size)
    return _Prepared(
        arr,
        inp,
        out,
        hoff,
        ids if len(ids) else np.zeros(1, np.int32),
        nfull,
        max(n_unique, 1),
        int(req.block_size),
    )


@dataclass(frozen=True, slots=True)
class KernelSettings:
    """The loop's integer settings, named (`kernel.settings.ICFG_FIELDS` order)."""

    max_seqs: int
    budget: int
    chunked: bool
    static: bool
    closed_concurrency: int  # 0 = open arrivals
    cap_units: int
    unit_tokens: int
    hash_block_tokens: int
    reserve_output: bool
    # Decode-only stretches in one pass (`kernel.decode_run`); False: every step through the
    # loop, the reference the tests hold the stretches to.
    decode_runs: bool = True

    def array(self) -> np.ndarray:
        from recommender.sim.kernel.settings import ICFG_FIELDS

        return np.array([int(getattr(self, f)) for f in ICFG_FIELDS], np.int64)


def policy_settings(policy: SchedulerPolicy) -> np.ndarray:
    """The policy's floats as the loop reads them (`kernel.settings.PCFG_FIELDS` order)."""
    from recommender.sim.kernel.settings import PCFG_FIELDS

    return np.array([float(getattr(policy, f)) for f in PCFG_FIELDS], np.float64)


def _acceptance(config: EngineConfig, options: SimOptions) -> float | None:
    """The acceptance the run takes: the caller's, else the one measured for the method."""
    if options.spec_acceptance is not None or config.speculative is None:
        return options.spec_acceptance
    return options.spec_acceptance_by_method.get(config.speculative.method)


def _arrivals(arr: np.ndarray, options: SimOptions) -> np.ndarray:
    if options.arrival == "trace":
        return arr * options.time_scale
    if options.arrival == "closed_loop" and options.concurrency is None:
        raise UsageError("closed_loop arrivals need a concurrency")
    out = np.zeros_like(arr, dtype=np.float64)
    if options.arrival == "closed_loop" and options.closed_loop_ramp_s > 0:
        # Users start evenly over the ramp; the rest sort after them (released on finishes).
        c = min(options.concurrency or 1, len(out))
        out[:] = options.closed_loop_ramp_s
        out[:c] = np.arange(c) * options.closed_loop_ramp_s / c
    return out


def simulate(
    requests: SimRequests,
    config: EngineConfig,
    gpu: GPU,
    model: ModelSpec,
    *,
    params: EngineParams | PerfParams | None = None,
    options: SimOptions | None = None,
) -> SimResult:
    """Serve `requests` on one replica of `config` and measure every request.

    Requests are served in arrival order (stable on ties); results come back in input order.
    Requests that can never be served (prompt + output − 1 tokens beyond the KV pool or
    max_model_len, or beyond the token budget with chunked prefill off) are rejected:
    NaN latencies, counted in `summary.rejected`.

    Args:
        requests: the workload (seconds, tokens; optional prompt block hashes).
        config: the engine configuration; unset knobs take the engine's defaults.
        params: calibrated parameters (a PerfParams, or one engine's); None = fit.json.
        options: arrival mode, batching, SLOs and series resolution.

    Raises:
        UsageError: malformed requests, a config that does not fit in memory, or
            closed_loop without a concurrency.
    """

    options = options or SimOptions()
    arr_in, inp_in, out_in = _validate(requests)
    unit = options.kv_block_tokens
    prefix = scheduler_caps(config, gpu).prefix_caching
    use_hashes = prefix and requests.block_hashes is not None
    if use_hashes and requests.block_size:
        unit = math.gcd(unit, int(requests.block_size))
    res = resolve(config, gpu, model, params if params is not None else load_params(),
                  harness=options.harness, engine_version=options.engine_version,
                  acceptance=_acceptance(config, options), kv_block_tokens=unit)
    cap, caps = res.memory.kv_capacity_blocks, res.caps
    worst = inp_in + out_in - 1
    ok = servable(worst, cap, unit, max_len=res.config.max_model_len,
                   budget=caps.budget_tokens, chunked=caps.chunked_prefill)
    keep = np.flatnonzero(ok)
    arrivals = _arrivals(arr_in, options)
    order = keep[np.argsort(arrivals[keep], kind="stable")]
    run = _Run.empty(len(arr_in))
    if len(order):
        # Requests enter the engine request_overhead_s after they are sent (API time).
        overhead = res.request_overhead_s
        entry = np.ascontiguousarray(arrivals[order] + overhead)
        own = unit * max(1, OWN_BLOCK_TOKENS // unit) if caps.prefix_caching else 0
        prep = _prepare(requests, order, entry, use_hashes, own)
        settings = KernelSettings(
            max_seqs=caps.max_running, budget=caps.budget_tokens,
            chunked=caps.chunked_prefill, static=options.batching == "static",
            closed_concurrency=(options.concurrency or 0) if options.arrival == "closed_loop"
            else 0, cap_units=cap, unit_tokens=unit, hash_block_tokens=prep.hash_block,
            reserve_output=res.policy.reserves_output)
        _run_kernel(run, prep, order, settings.array(), res.coefficients.array(),
                    table=res.table, policy=policy_settings(res.policy))
        run.ttft += overhead  # latencies count from the send, not the entry
        run.e2e += overhead
    return _result(run, (inp_in, out_in, ok), options=options, cap=cap)


@dataclass(slots=True)
class _Run:
    """What one kernel run measured, per request in input order (NaN: not served)."""

    ttft: np.ndarray
    e2e: np.ndarray
    npre: np.ndarray
    max_itl: np.ndarray
    raw: np.ndarray
    itl: np.ndarray  # histogram + (sum, count, max), see kernel.loop.run
    steps: int = 0
    preempts: int = 0
    makespan: float = 0.0

    @classmethod
    def empty(cls, n: int) -> _Run:
        from recommender.sim.kernel.record import ITL_BINS

        nan = np.full(n, np.nan)
        return cls(nan, nan.copy(), np.zeros(n, np.int64), nan.copy(), np.zeros((0, 4)),
                   np.zeros(ITL_BINS + 3))


def _run_kernel(
    run: _Run, prep: _Prepared, order: np.ndarray, icfg: np.ndarray, coef: np.ndarray, *,
    table: np.ndarray, policy: np.ndarray,
) -> None:
    from recommender.sim.kernel import loop
    from recommender.sim.kernel.freshness import ensure_fresh
    from recommender.sim.kernel.record import SERIES_CAP

    ensure_fresh()  # before the process's first kernel call
    series = np.zeros((SERIES_CAP, 4))
    requests = loop.Requests(prep.arrival, prep.inp, prep.out, prep.hoff, prep.hid,
                             prep.nfull, int(prep.n_ids))
    first_t, fin_t, npre, stats, max_itl = loop.run(
        requests, icfg, coef, np.ascontiguousarray(table, dtype=np.float64), policy, series,
        run.itl)
    if stats[3]:
        raise UsageError(f"simulation stalled (code {int(stats[3])}): nothing schedulable")
    run.ttft[order] = first_t - prep.arrival  # closed loop: arrival = release time
    run.e2e[order] = fin_t - prep.arrival
    run.npre[order] = npre
    run.max_itl[order] = np.where(prep.out > 1, max_itl, np.nan)
    run.steps, run.preempts, run.raw = int(stats[0]), int(stats[1]), series[: stats[2]]
    run.makespan = float(fin_t.max())


def _result(
    run: _Run,
    work: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    options: SimOptions,
    cap: int,
) -> SimResult:
    inp, out, ok = work
    ttft, e2e, makespan = run.ttft, run.e2e, run.makespan
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2e - ttft) / (out - 1), np.nan)
    tpot[~ok] = np.nan
    done = int(ok.sum())

    def rate(x: float) -> float:
        return x / makespan if makespan > 0 else 0.0

    goodput = rate(float((ok & meets_slos(ttft, tpot, options.slo_ttft_s,
                                          options.slo_tpot_s)).sum()))
    t_s, queue, running, kv = series(run.raw, options.series_interval_s)
    summary = SimSummary(
        completed=done,
        rejected=len(ok) - done,
        makespan_s=makespan,
        ttft_s=latency_of(ttft),
        tpot_s=latency_of(tpot),
        e2e_s=latency_of(e2e),
        itl_s=histogram_stats(run.itl),
        itl_max_s=histogram_max(run.itl),
        request_throughput_rps=rate(done),
        output_throughput_tok_s=rate(float(out[ok].sum())),
        total_throughput_tok_s=rate(float((inp[ok] + out[ok]).sum())),
        goodput_rps=goodput,
        steps=run.steps,
        preemptions=run.preempts,
        kv_capacity_blocks=cap,
    )
    return SimResult(
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        preemptions=run.npre,
        max_itl_s=run.max_itl,
        itl_histogram=run.itl,
        series_t_s=t_s,
        queue_len=queue,
        running_seqs=running,
        kv_usage=kv,
        summary=summary,
    )


__all__ = [
    "KernelSettings",
    "SimOptions",
    "SimRequests",
    "simulate",
]
