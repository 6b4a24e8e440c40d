"""`predict` through the simulator: one fixed-length or dataset workload, with latency tails.

Owns `PredictRequest` (everything `python -m app predict` can be told: the config, GPU,
model, GPU count, load, harness, engine release, step-time provider and speculative
acceptance), `predict` (the one function the CLI, the accuracy bench and the calibration
fit answer a request with), `simulate_load` (a fixed ISL/OSL or dataset-lengths
`LoadSpec`, its per-request lengths from `recommender.sim.lengths.draw` — closed loop at a
concurrency, Poisson or Gamma arrivals at a rate (seeded; rate × duration of them when a
duration bounds the run), a burst (`core.arrivals.piecewise_poisson`, the arrivals `bench`
sends), or offline N queued at t = 0; a soak is predicted as its steady load —
or a benchmark's own requests as it sends them (`core.load.SentRequests`: `bench --predict`
and Validate), over the deployment's scheduler replicas, each simulated by
`recommender.sim.simulator`) and `LoadPrediction` (whose `json_ms` is the DESIGN §2.4
`predict --json` view). No I/O beyond reading the catalog, fit and bands files.

Closed loop: every user sends its first request at t = 0, as `vllm bench serve
--max-concurrency`, GuideLLM's concurrent mode and ServeFit's own load generator do.

Replicas: one per attention DP rank over all GPUs, gpus / (tp × pp) (instances of tp × pp ×
dp GPUs, dp ranks each). The load splits evenly (closed loop and offline: users / requests
differ by at most one between replicas, so at most two distinct replica loads are
simulated; Poisson: a split Poisson stream is Poisson at rate/R, so one replica is simulated
and scaled). DP ranks are balanced by the engine's router (round-robin), as here.
"""

from __future__ import annotations

import math
import re
from itertools import chain
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from core.arrivals import piecewise_poisson, renewal_times
from core.errors import UsageError
from core.figures import Latency, ServingFigures, latency_of
from core.load import (
    MAX_REQUESTS,
    Arrival,
    Burst,
    ClosedLoop,
    LoadSpec,
    Rate,
    SentRequests,
    TraceWindow,
)
from core.records import Record
from engines.config import EngineConfig, EngineKind
from recommender.calibration.bands import intervals_of
from recommender.calibration.bands_file import BANDS_FILE, band_of_prediction
from recommender.calibration.cells import cell_of, regime_of
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.defaults import fill
from recommender.model.params import PerfParams, load_params
from recommender.model.resolve import Harness, scheduler_replicas
from recommender.model.steptime import DEFAULT_KIND
from recommender.sim.lengths import draw
from recommender.sim.overload import overload_warning
from recommender.sim.refusals import refusal_reason
from recommender.sim.result import SimResult, histogram_max, histogram_stats
from recommender.sim.simulator import SimOptions, SimRequests, simulate
from recommender.sim.trace_window import replica_share, take

# Requests simulated when the caller gives no count: closed loop CLOSED_PER_USER per user
# (ramp-up and drain then cost a few % of the throughput, as in a real finite benchmark),
# at least MIN_REQUESTS in all; rate mode RATE_DEFAULT_REQUESTS.
CLOSED_PER_USER = 10
MIN_REQUESTS = 200
RATE_DEFAULT_REQUESTS = 2000
# An engine release as the engines number theirs: 0.10.1, 1.0.0rc3, 0.6.6.post1, v0.11.
RELEASE_PATTERN = r"v?\d{1,4}(\.\d{1,4}){0,3}((rc|a|b|\.post|\.dev)\d{1,4})?"


class LoadPrediction(ServingFigures):
    """Simulated serving of one fixed-length workload: the serving figures (throughputs over
    all GPUs; TTFT, TPOT and E2E per request; ITL pooled over every emission gap) and the
    run's context."""

    engine: EngineKind = Field(description="Engine whose parameters were applied.")
    mode: str = Field(description="closed_loop, rate, burst, offline, or sent (a benchmark's "
                      "own open-loop requests at their send offsets).")
    replicas: int = Field(ge=1, description="Scheduler replicas: DP ranks over all GPUs.")
    requests: int = Field(ge=1, description="Requests simulated over all replicas.")
    completed: int = Field(ge=0, description="Requests served to the end.")
    makespan_s: float = Field(ge=0, description="Longest replica's first arrival to last token.")
    itl_max_s: float = Field(description="Largest gap between two emissions of any request.")
    kv_capacity_tokens: int = Field(ge=0, description="KV tokens one replica holds.")
    preemptions: int = Field(ge=0, description="Recompute preemptions, all replicas.")
    max_model_len: int = Field(ge=1, description="Longest sequence the config serves: given, "
                               "or sized to the workload.")
    refused: int = Field(default=0, ge=0, description="Requests refused (never servable).")
    warnings: list[str] = Field(default_factory=list, description="What the caller should "
                                "know: max_model_len sized to the workload, refusals.")

    def json_ms(self) -> dict[str, object]:
        """The `predict --json` view (DESIGN §2.4): the serving figures' ms view, and the
        run's context figures."""
        return {**super().json_ms(), "itl_max_ms": self.itl_max_s * 1e3, "mode": self.mode,
                "requests": self.requests, "replicas": self.replicas,
                "kv_capacity_tokens": self.kv_capacity_tokens,
                "preemptions": self.preemptions, "max_model_len": self.max_model_len,
                "refused": self.refused, "warnings": list(self.warnings)}


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    """[(per-replica amount, replicas with it)] for `total` spread over `parts` evenly."""
    lo, extra = divmod(total, parts)
    groups = [(lo + 1, extra), (lo, parts - extra)]
    return [(amount, count) for amount, count in groups if amount > 0 and count > 0]


def _groups(replicas: int, load: LoadSpec
            ) -> tuple[str, list[tuple[np.ndarray, SimOptions, int]]]:
    """(mode, [(send times of one replica's requests, options, replicas running it)]).
    Open loop: a split Poisson stream is Poisson at rate/R, so one replica's share is drawn
    (its first request at t = 0 for a rate) and scaled."""
    arrival, num_requests, seed = load.arrival, load.num_requests, load.seed
    if isinstance(arrival, ClosedLoop):
        concurrency = arrival.concurrency
        out = []
        for users, count in _split(concurrency, replicas):
            n = (num_requests * users // concurrency if num_requests
                 else max(CLOSED_PER_USER * users, MIN_REQUESTS))
            options = SimOptions(arrival="closed_loop", concurrency=users)
            out.append((np.zeros(max(n, users)), options, count))
        return "closed_loop", out
    if isinstance(arrival, Burst):
        pieces = [(t0, t1, rate / replicas) for _, t0, t1, rate in arrival.phases()]
        at = np.concatenate(piecewise_poisson(np.random.default_rng(seed), pieces))
        if not len(at):
            raise UsageError("the burst sends no request: raise its rates or lengthen it")
        return "burst", [(at, SimOptions(), replicas)]
    if isinstance(arrival, Rate):
        n = max(1, math.ceil(_open_count(load, arrival) / replicas))
        at = renewal_times(np.random.default_rng(seed), arrival.rate_rps / replicas, count=n,
                           process=arrival.process, cv=arrival.cv, first_at_start=True)
        return "rate", [(at, SimOptions(), replicas)]
    assert num_requests is not None  # LoadSpec requires it for fixed-length offline loads
    return "offline", [(np.zeros(n), SimOptions(arrival="offline"), c)
                       for n, c in _split(num_requests, replicas)]


def _open_count(load: LoadSpec, rate: Rate) -> int:
    """Requests of an open-loop rate: num_requests, else rate × duration, else the default."""
    if load.num_requests is not None or load.duration_s is None:
        return load.num_requests or RATE_DEFAULT_REQUESTS
    n = max(1, round(rate.rate_rps * load.duration_s))
    if n > MAX_REQUESTS:
        raise UsageError(f"rate × duration is {n:,} requests, more than one prediction holds "
                         f"({MAX_REQUESTS:,}): shorten the duration")
    return n


def _unpredictable(load: LoadSpec) -> str | None:
    """Why `load` is no one load the simulator can serve, in the user's words (or None)."""
    runs = {"sweep": "predict one level: a sweep is a closed loop at each concurrency",
            "boundary": "predict one step: a boundary is its load at each compression"}
    if load.run.kind in runs:
        return runs[load.run.kind]
    if load.max_in_flight is not None:
        return ("the simulator's open loop has no cap on requests in flight: leave the cap "
                "(--concurrency) out")
    if isinstance(load.arrival, ClosedLoop) and load.num_requests is None and (
            load.duration_s is not None):
        return ("a closed loop bounded only by a duration sends as many requests as the "
                "server finishes: give a request count")
    return None


# One replica's requests, how they arrive, and how many replicas run that same load.
Batch = tuple[SimRequests, SimOptions, int]


def _batches(load: LoadSpec, replicas: int) -> tuple[str, list[Batch], tuple[int, int] | None]:
    """(mode, batches, the mean request when the lengths are fixed or a dataset's: a load
    whose mean request is refused is refused whole, up front)."""
    lengths = load.lengths
    refusal = _unpredictable(load)
    if refusal is not None:
        raise UsageError(refusal)
    if isinstance(lengths, SentRequests):
        return _sent_batches(lengths, load.arrival, replicas)
    if isinstance(lengths, TraceWindow) or load.arrival is None:
        raise UsageError("predict simulates fixed or dataset lengths, or a benchmark's own "
                         "requests; a trace window is `recommend`'s")
    mode, groups = _groups(replicas, load)
    batches = []
    for j, (arrival, options, count) in enumerate(groups):
        inputs, outputs = draw(lengths, len(arrival), load.seed + j)
        batches.append((SimRequests(arrival, inputs, outputs), options, count))
    return mode, batches, (lengths.input_tokens, lengths.output_tokens)


def _sent_batches(sent: SentRequests, arrival: Arrival | None,
                  replicas: int) -> tuple[str, list[Batch], None]:
    """A benchmark's requests over the replicas. Open loop: dealt round-robin, as the
    engine's DP router deals them; replica 0's share at its send offsets, scaled. Closed
    loop: the users split as `_groups` splits them, a replica of u of the C users serving
    u/C of the requests (`_groups`' count), taken evenly through the sent order."""
    n = len(sent.input_tokens)
    if n < replicas:
        raise UsageError(f"{n} request(s) over {replicas} scheduler replicas: send at least "
                         "one per replica")
    req = _sim_requests(sent)
    if not isinstance(arrival, ClosedLoop):
        return "sent", [(replica_share(req, replicas), SimOptions(), replicas)], None
    batches = []
    for users, count in _split(arrival.concurrency, replicas):
        k = max(1, n * users // arrival.concurrency)
        share = take(req, np.arange(k) * n // k, rebase=False)
        batches.append((share, SimOptions(arrival="closed_loop", concurrency=users), count))
    return "closed_loop", batches, None


def _sim_requests(sent: SentRequests) -> SimRequests:
    """The sent requests as the simulator's arrays (a closed loop's all at t = 0)."""
    n = len(sent.input_tokens)
    arrival = np.zeros(n) if sent.at_s is None else np.asarray(sent.at_s, dtype=np.float64)
    hashes = offsets = None
    if sent.block_hashes is not None:
        sizes = [len(h) for h in sent.block_hashes]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        hashes = np.fromiter(chain.from_iterable(sent.block_hashes), dtype=np.uint64,
                             count=int(offsets[-1]))
    return SimRequests(arrival, np.asarray(sent.input_tokens, dtype=np.int64),
                       np.asarray(sent.output_tokens, dtype=np.int64), hashes, offsets,
                       sent.block_size)


def _combine(runs: list[tuple[SimResult, int]], pick: str) -> Latency:
    """Per-request Latency over all replicas (each run counted `count` times)."""
    return latency_of(np.concatenate([np.tile(getattr(r, pick), c) for r, c in runs]))


class PredictRequest(Record):
    """One `predict` question, exactly what its command-line flags can say."""

    config: EngineConfig = Field(description="The deployment; unset knobs = the engine's.")
    gpu: str = Field(min_length=1, description="Catalog GPU name.")
    model: str = Field(min_length=1, description="Catalog name, HF id or config.json path.")
    gpus: int | None = Field(default=None, ge=1, le=1024, description="GPUs in all (default: one "
                             "instance, tp × pp × dp).")
    load: LoadSpec = Field(description="Lengths and arrivals.")
    harness: Harness = Field(default="served", description="How the load reaches the "
                             "engine: its API server, or in-process (`resolve.HARNESSES`).")
    engine_version: str | None = Field(
        default=None, description="The engine release asked about, e.g. 0.10.1 or 1.0.0rc3 "
        "(memory-fraction default where it differs).")
    step_time: str = Field(default=DEFAULT_KIND, description="Step-time provider.")
    spec_acceptance: float | None = Field(default=None, ge=0, le=1, description="Speculative "
                                          "per-token acceptance (default: the method's).")
    slo_ttft_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                     description="Per-request TTFT bound of goodput.")
    slo_tpot_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                     description="Per-request TPOT bound of goodput.")

    @field_validator("engine_version")
    @classmethod
    def _a_release(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(RELEASE_PATTERN, value):
            raise ValueError(f"{value[:40]!r} is not an engine release (e.g. 0.10.1, 1.0.0rc3)")
        return value


def predict(request: PredictRequest, *, params: PerfParams | None = None,
            bands_file: str | Path = BANDS_FILE) -> LoadPrediction:
    """The answer to `request`: its model and GPU from the catalog, the fitted parameters of
    its step-time provider (`params`, default data/calibration/fit.json's), simulated.

    Raises:
        UsageError: an unknown GPU or model, parameters fitted for another step-time
            provider, or whatever `simulate_load` refuses.
    """
    from recommender.catalog.lookup import get_gpu, get_model  # reads data/catalog on first use

    fitted = params or load_params(step_time=request.step_time)
    if fitted.step_time != request.step_time:
        raise UsageError(f"parameters fitted for step-time provider {fitted.step_time!r}, "
                         f"asked for {request.step_time!r}")
    model = get_model(request.model)
    config = request.config.model_copy(update={"model": model.name})
    return simulate_load(config, model, get_gpu(request.gpu), request.load, gpus=request.gpus,
                         params=fitted, spec_acceptance=request.spec_acceptance,
                         bands_file=bands_file, harness=request.harness,
                         engine_version=request.engine_version,
                         slos=(request.slo_ttft_s, request.slo_tpot_s))


def simulate_load(
    config: EngineConfig, model: ModelSpec, gpu: GPU, load: LoadSpec, *,
    gpus: int | None = None, params: PerfParams | None = None,
    spec_acceptance: float | None = None, bands_file: str | Path = BANDS_FILE,
    harness: Harness = "served", engine_version: str | None = None,
    slos: tuple[float | None, float | None] = (None, None),
) -> LoadPrediction:
    """Simulate `config` serving a fixed ISL/OSL, dataset-lengths or sent-requests `load` on
    `gpus` GPUs (instances of tp × pp × dp GPUs; default one) and summarise it.

    Dataset lengths (`core.load.DatasetLengths`) are drawn per request, seeded by the load's
    seed (`recommender.sim.lengths.draw`); throughputs count the tokens drawn, and a drawn
    request that can never be served is refused alone (counted in `refused`, warned).

    The load's arrival: closed loop (`num_requests` in all, default max(10·C, 200); every
    user sends its first request at t = 0, as `vllm bench serve --max-concurrency`,
    GuideLLM's concurrent mode and InferenceX's client start them), a rate
    (Poisson or Gamma, seeded; `num_requests`, else rate × `duration_s`, else 2000), a burst
    (seeded Poisson per phase, as `bench` sends it) or offline (`num_requests` queued at
    t = 0). A soak is its steady load. Goodput counts the served requests within `slos`
    (per-request TTFT and TPOT bounds, `core.figures.meets_slos`, as a benchmark counts
    them; none: all).

    The prediction's `band` is its cell's cross-validated error
    (`recommender.calibration.bands_file`, from `bands_file`); outside every calibrated cell
    it is None and a warning says so. A model outside the catalog (a config.json read by
    `hf_config`, parameters estimated) is warned about too, with where its shapes came from
    and what they approximate.
    Unset knobs are the engine's (`recommender.model.defaults.fill`, for the workload's longest
    request: max_model_len sized to it, said in the prediction's `warnings`).

    Raises:
        UsageError: a trace-window load, a sweep or a boundary (several loads), a cap on
            requests in flight, a closed loop bounded only by a duration, gpus not a
            multiple of one instance, a config that does not fit, or a mean-length request
            that can never be served (too long for max_model_len, the KV pool or an unchunked
            step: with fixed lengths, every request is refused).
    """
    replicas = scheduler_replicas(config, gpus)
    mode, batches, mean = _batches(load, replicas)
    longest = max(int((b.input_tokens + b.output_tokens).max()) for b, _, _ in batches)
    filled = fill(config, gpu, model, longest_tokens=longest, engine_version=engine_version)
    config, warnings = filled.config, list(filled.warnings)
    reason = None if mean is None else refusal_reason(
        config, gpu, model, *mean, kv_block_tokens=SimOptions().kv_block_tokens)
    if reason is not None:  # the mean request refused: every (fixed) or most (dataset) are
        raise UsageError(f"every request refused: {reason}")
    if model.params_source == "estimated":  # a user's or aiconfigurator's config.json
        warnings.append(_uncatalogued(model))
    fitted = params or load_params()
    runs: list[tuple[SimResult, int]] = []
    for req, options, count in batches:
        opts = options.model_copy(update={
            "spec_acceptance": spec_acceptance, "slo_ttft_s": slos[0], "slo_tpot_s": slos[1],
            "harness": harness, "engine_version": engine_version})
        res_run = simulate(req, config, gpu, model, params=fitted, options=opts)
        runs.append((res_run, count))
    assert config.max_model_len is not None  # sized by fill
    # Open-loop sent requests carry their own arrivals: the rate regime's errors apply.
    regime = regime_of(load.arrival) if load.arrival is not None else "rate"
    band, uncalibrated = band_of_prediction(
        cell_of(config.engine, gpu, model, regime), bands_file, fitted.step_time)
    warnings += [uncalibrated] if uncalibrated else []
    refused = sum(r.summary.rejected * c for r, c in runs)
    if refused:
        i, o = _longest_pair(batches)
        reason = refusal_reason(config, gpu, model, i, o)
        if all(r.summary.completed == 0 for r, _ in runs):
            raise UsageError(f"every request refused, e.g. {reason}")
        warnings.append(f"{refused} request(s) of the drawn lengths refused, e.g. {reason}")
    warnings += overload_warning(mode, [(req.arrival_s, res) for (req, _, _), (res, _)
                                        in zip(batches, runs, strict=True)])
    intervals, said = intervals_of(config.engine, gpu, model, regime,
                                   bands_file=bands_file, step_time=fitted.step_time,
                                   engine_version=engine_version)
    pred = _prediction(config.engine, mode, replicas, runs,
                       max_model_len=config.max_model_len, warnings=warnings + said)
    return pred.model_copy(update={"band": band, "intervals": intervals})




def _uncatalogued(model: ModelSpec) -> str:
    """The warning for a model outside the catalog: where its shapes came from, and what they
    only approximate."""
    notes = f"; {model.notes}" if model.notes else ""
    return (f"model {model.name} is not in the catalog: shapes from {model.source}, parameter "
            f"count estimated from them, no published measurement of this model{notes}")


def _longest_pair(batches: list[Batch]) -> tuple[int, int]:
    """(prompt, output) tokens of the longest request simulated."""
    inputs = np.concatenate([b.input_tokens for b, _, _ in batches])
    outputs = np.concatenate([b.output_tokens for b, _, _ in batches])
    k = int(np.argmax(inputs + outputs))
    return int(inputs[k]), int(outputs[k])


def _prediction(
    engine: EngineKind, mode: str, replicas: int, runs: list[tuple[SimResult, int]],
    *, max_model_len: int, warnings: list[str],
) -> LoadPrediction:
    def total(figure: str) -> float:  # replicas run side by side: their rates add
        return sum(getattr(r.summary, figure) * c for r, c in runs)

    hists = [(r.itl_histogram, c) for r, c in runs if r.itl_histogram is not None]
    hist = np.sum([h * c for h, c in hists], axis=0)
    hist[-1] = max(h[-1] for h, _ in hists)  # the largest gap: a maximum, not a sum
    return LoadPrediction(
        engine=engine, mode=mode, replicas=replicas,
        requests=sum(len(r.ttft_s) * c for r, c in runs),
        completed=sum(r.summary.completed * c for r, c in runs),
        makespan_s=max(r.summary.makespan_s for r, _ in runs),
        output_throughput_tok_s=total("output_throughput_tok_s"),
        total_throughput_tok_s=total("total_throughput_tok_s"),
        request_throughput_rps=total("request_throughput_rps"),
        goodput_rps=total("goodput_rps"),
        ttft_s=_combine(runs, "ttft_s"), tpot_s=_combine(runs, "tpot_s"),
        itl_s=histogram_stats(hist), e2e_s=_combine(runs, "e2e_s"),
        itl_max_s=histogram_max(hist) or 0.0,
        kv_capacity_tokens=runs[0][0].summary.kv_capacity_blocks * SimOptions().kv_block_tokens,
        preemptions=sum(r.summary.preemptions * c for r, c in runs),
        max_model_len=max_model_len,
        refused=sum(r.summary.rejected * c for r, c in runs), warnings=warnings,
    )
