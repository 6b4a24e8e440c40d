"""Benchmark of `recommender.sim.simulator`: seconds to simulate 100 k requests through one config.

Synthetic, seeded, Azure-conversation-like lengths (lognormal input, median ~1k tokens; output
median ~200) with Poisson arrivals; optional shared prefixes as block hashes. Times each
arrival mode, plain and with speculative decoding, after one warm-up (numba compile / cache
load) and prints requests/s simulated. DESIGN §5 budget: 100 k requests < 2 s; a full
recommendation over all candidates < 30 s (`recommend_time`: the bundled sample).

Each mode is timed twice in the same run: as the simulator runs it, and against the baseline of
the step-by-step loop (`step_by_step`: decode-only stretches not taken in one pass), with the
ratio and whether the two answers agree.

`--step-time measured` runs the same modes with the measured-kernel provider
(`recommender.model.steptime`; its table is built once, before the timings, and the numba loop
reads it without calling Python).

Run: .venv/bin/python bench/sim_speed.py [--requests 100000] [--rate 20] [--prefix]
     [--step-time roofline|measured] [--no-recommend]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_by_step import step_by_step

from engines.config import EngineConfig, SpeculativeConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.params import load_params
from recommender.model.steptime import DEFAULT_KIND, PROVIDERS
from recommender.sim.simulator import SimOptions, SimRequests, simulate


def make_requests(n: int, rate: float, prefix: bool, seed: int = 0) -> SimRequests:
    """Seeded Azure-conv-like requests; with `prefix`, 16-token block hashes where half the
    requests start with one of 50 shared 1024-token system prompts."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    arrival -= arrival[0]
    inp = np.clip(rng.lognormal(np.log(1000), 1.0, n), 1, 16000).astype(np.int64)
    out = np.clip(rng.lognormal(np.log(200), 0.8, n), 1, 2000).astype(np.int64)
    if not prefix:
        return SimRequests(arrival, inp, out)
    counts = inp // 16
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    hashes = rng.integers(1, 2**63, offsets[-1], dtype=np.int64).astype(np.uint64)
    shared = rng.integers(0, 50, n)
    for i in np.flatnonzero(rng.random(n) < 0.5):
        k = min(64, counts[i])
        hashes[offsets[i] : offsets[i] + k] = np.uint64(shared[i]) * np.uint64(1000) + np.arange(
            k, dtype=np.uint64
        )
    return SimRequests(arrival, inp, out, hashes, offsets, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=6.0, help="Poisson arrivals per second")
    ap.add_argument("--prefix", action="store_true", help="add shared-prefix block hashes")
    ap.add_argument("--step-time", choices=list(PROVIDERS), default=DEFAULT_KIND,
                    help="step-time provider (default: the measured tables)")
    ap.add_argument("--no-recommend", action="store_true", help="skip the recommendation timing")
    args = ap.parse_args()
    simulations(args)
    if not args.no_recommend:
        recommend_time(args)


def simulations(args: argparse.Namespace) -> None:
    """Time each arrival mode on 100 k requests after one warm-up."""
    gpu, model = get_gpu("H100-SXM"), get_model("llama-3.1-8b")
    config = EngineConfig(engine="vllm", model=model.name)
    params = load_params(step_time=args.step_time)
    print(f"step-time provider: {args.step_time}")
    req = make_requests(args.requests, args.rate, args.prefix)
    modes = {
        "trace": (config, SimOptions(arrival="trace")),
        "offline": (config, SimOptions(arrival="offline")),
        "closed_loop_64": (config, SimOptions(arrival="closed_loop", concurrency=64)),
        "trace_eagle_k3": (
            config.model_copy(update={"speculative": SpeculativeConfig(
                method="eagle", num_tokens=3, draft_model="yuhuili/EAGLE-LLaMA3.1-8B")}),
            SimOptions(arrival="trace"),
        ),
    }
    t0 = time.perf_counter()
    simulate(
        SimRequests(req.arrival_s[:100], req.input_tokens[:100], req.output_tokens[:100]),
        config,
        gpu,
        model,
        params=params,
    )
    print(f"warm-up (import + numba compile/cache load): {time.perf_counter() - t0:.2f} s")
    for name, (cfg, options) in modes.items():
        t0 = time.perf_counter()
        res = simulate(req, cfg, gpu, model, params=params, options=options)
        dt = time.perf_counter() - t0
        with step_by_step():
            t0 = time.perf_counter()
            base = simulate(req, cfg, gpu, model, params=params, options=options)
            dt_base = time.perf_counter() - t0
        s = res.summary
        same = (np.array_equal(res.ttft_s, base.ttft_s, equal_nan=True)
                and np.array_equal(res.e2e_s, base.e2e_s, equal_nan=True))
        print(
            f"{name:15s} {args.requests} requests in {dt:.2f} s "
            f"({args.requests / dt:,.0f} req/s simulated; budget < 2 s: "
            f"{'met' if dt < 2 else 'NOT met'}) | step by step {dt_base:.2f} s, "
            f"x{dt_base / dt:.2f}, {'same' if same else 'DIFFERENT'} TTFT and E2E | "
            f"steps {s.steps:,} preemptions {s.preemptions:,} | "
            f"{s.request_throughput_rps:.1f} rps, "
            f"TTFT p50 {s.ttft_s.p50 * 1e3:.0f} ms, TPOT p50 {s.tpot_s.p50 * 1e3:.1f} ms"
        )


def recommend_time(args: argparse.Namespace) -> None:
    """The full search over all candidates for the bundled sample (bench/recommend_speed.py),
    against the < 30 s budget."""
    del args
    from recommend_speed import timed_recommendation

    timed_recommendation()


if __name__ == "__main__":
    main()
