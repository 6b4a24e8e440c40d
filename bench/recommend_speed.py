"""Benchmark of `recommender.decision.recommend`: seconds for a whole recommendation on the sample.

Runs the full search (every engine plug-in, formats, parallelism, scheduler knobs, features,
whole-window polishing, counterfactual reasons, warnings, routing) over the bundled Azure
conversation sample and prints the wall time, the simulations run and the candidates ranked
on the whole window, plus the pick and how far it holds (`recommender.decision.capacity`). One
warm-up run first loads the numba caches; the timed runs are what a user waits for once the caches
exist. DESIGN §5 budget: < 30 s. Then the same recommendation with the step-by-step simulator
(`step_by_step`, decode runs off) as the baseline, and whether every candidate's prediction is
the same.

Run: .venv/bin/python bench/recommend_speed.py [--gpu H100-SXM] [--gpus 1]
     [--model meta-llama/Llama-3.1-8B-Instruct] [--repeat 1] [--trace PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from step_by_step import step_by_step  # noqa: E402

from recommender.decision.recommend import recommend_trace  # noqa: E402
from recommender.decision.recommendation import Recommendation, RecommendRequest  # noqa: E402

SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
BUDGET_S = 30.0


def timed_recommendation(trace: str = str(SAMPLE), gpu: str = "H100-SXM", gpus: int = 1,
                         model: str = "meta-llama/Llama-3.1-8B-Instruct",
                         repeat: int = 1) -> None:
    """Warm up (numba caches), then time `repeat` whole recommendations and print each."""
    request = RecommendRequest(source=trace, gpu=gpu, gpus=gpus, model=model)
    recommend_trace(request.model_copy(update={"max_requests": 200}))  # warm-up: numba caches
    for _ in range(repeat):
        start = time.perf_counter()
        rec = recommend_trace(request)
        wall = time.perf_counter() - start
        print(f"recommend {Path(trace).name} on {gpus}x {gpu}, {model}: "
              f"{wall:.1f} s wall (budget {BUDGET_S:.0f} s, "
              f"{'met' if wall < BUDGET_S else 'NOT met'}), "
              f"{rec.candidates_simulated} simulations, {len(rec.candidates)} candidates "
              f"on the whole window ({rec.window.split(';')[0]})")
    with step_by_step():
        start = time.perf_counter()
        base = recommend_trace(request)
        base_wall = time.perf_counter() - start
    same = _figures(base) == _figures(rec)
    print(f"step-by-step simulator (decode runs off, the baseline): {base_wall:.1f} s, "
          f"x{base_wall / wall:.2f} of the last timed run; "
          f"{'the same' if same else 'DIFFERENT'} candidates, TTFT, E2E and throughput")
    print(f"pick: {rec.pick.label}")
    if rec.capacity is not None:
        cap = rec.capacity
        print(f"capacity: the pick holds {cap.pick.rate_rps:.2f} req/s "
              f"({cap.pick.multiple_of_mean:.2f}x the mean; binds first: {cap.pick.binding}), "
              f"boundary searches of {cap.pick.simulations} + "
              f"{sum(b.simulations for b in cap.alternatives)} simulations (pick + other "
              f"engines), growth x{'/x'.join(f'{g.factor:g}' for g in cap.growth)}: "
              f"{', '.join(str(g.pick_gpus) for g in cap.growth)} GPUs for the pick")


def _figures(rec: Recommendation) -> list[tuple]:
    """Each candidate's config, TTFT, E2E and output throughput (the ITL sum, added per step
    in a decode run, agrees only to rounding)."""
    return [(c.config, c.predicted.ttft_s, c.predicted.e2e_s, c.predicted.output_throughput_tok_s)
            for c in rec.candidates]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(SAMPLE))
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs after the warm-up")
    args = parser.parse_args()
    timed_recommendation(args.trace, args.gpu, args.gpus, args.model, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
