"""Candidate search: coarse-to-fine ranking of the grid.

Owns the staged search: engine/parallelism/formats on a short busy window, then scheduler
knobs, then features, each stage keeping the best few per engine, the leaders re-simulated on
the whole window, and finally polished one knob at a time; the replicas tried, and a cache
of simulations by (config, window). The grid is `grid`'s, the variants `variants`'s, the
scores `scoring.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core.errors import UsageError
from engines.config import EngineConfig
from engines.registry import ENGINES
from recommender.decision.goals import Goals, Target
from recommender.decision.grid import base_grid, max_model_len, prune
from recommender.decision.scoring import Evaluation, evaluate
from recommender.decision.variants import (
    feature_variants,
    one_knob_variants,
    scheduler_variants,
    simulator_models_speculative,
)
from recommender.sim.simulator import SimRequests

COARSE_REQUESTS = 2000
KEEP_PER_ENGINE = 2
FINAL_TOP = 6
POLISH_ROUNDS = 3

Progress = Callable[[float, str], None]


@dataclass(slots=True)
class SearchResult:
    """Every full-window evaluation (ranked best first) and what the search did."""

    ranked: list[Evaluation]
    simulated: int
    pruned: dict[str, int] = field(default_factory=dict)  # reason → configs
    speculative_modelled: bool = False
    # Whole-window evaluations by (config JSON, replicas), for counterfactuals to reuse.
    full: dict[tuple[str, int], Evaluation] = field(default_factory=dict)


class _Runner:
    """Simulates configs, caching by (config, window) and counting simulations."""

    def __init__(self, target: Target, goals: Goals, progress: Progress | None) -> None:
        self.target, self.goals, self.progress = target, goals, progress
        self.simulated = 0
        self.pruned: dict[str, int] = {}
        self._cache: dict[tuple[str, str], Evaluation | None] = {}

    def run(self, pairs: Iterable[tuple[EngineConfig, int]], requests: SimRequests,
            window: str) -> list[Evaluation]:
        """Evaluate each (config, replicas) on `window` ('coarse' or 'full')."""
        out = []
        for config, replicas in pairs:
            key = (config.model_dump_json() + f"|{replicas}", window)
            if key not in self._cache:
                self._cache[key] = self._one(config, requests, replicas)
            if (evaluation := self._cache[key]) is not None:
                out.append(evaluation)
        return out

    def _one(self, config: EngineConfig, requests: SimRequests, replicas: int
             ) -> Evaluation | None:
        reason = prune(config, self.target)
        if reason is not None:
            self.pruned[reason] = self.pruned.get(reason, 0) + 1
            return None
        self.simulated += 1
        try:
            return evaluate(config, requests, replicas, self.target, self.goals)
        except UsageError as exc:
            why = f"simulation: {str(exc)[:80]}"
            self.pruned[why] = self.pruned.get(why, 0) + 1
            return None


def _best_per_engine(evals: list[Evaluation], k: int) -> list[Evaluation]:
    ranked = sorted(evals, key=lambda e: -e.score)
    kept: list[Evaluation] = []
    for kind in ENGINES:
        kept += [e for e in ranked if e.config.engine == kind][:k]
    return kept


def search(requests: SimRequests, coarse: SimRequests, target: Target, goals: Goals, *,
           quick: bool = False, seeds: Iterable[EngineConfig] = (),
           progress: Progress | None = None) -> SearchResult:
    """Staged search; `coarse` is the short busy window the first stages rank on.

    quick: formats and parallelism only (no scheduler or feature stage), fewer finalists,
    and only the overall best polished — for what-if questions (more GPUs, another GPU,
    one routed segment). seeds: configs that go straight to the final stage (e.g. the
    single deployment's pick when a routed part is searched).
    """
    model_len = max_model_len(requests, target.model)
    runner = _Runner(target, goals, progress)
    spec = not quick and simulator_models_speculative(target, model_len)
    hashes = requests.block_hashes is not None
    _tell(progress, 0.05, "formats and parallelism")
    base = [(c, r) for c in base_grid(target, model_len)
            for r in replica_choices(c, target.gpus, goals)]
    stage = runner.run(base, coarse, "coarse")
    if not quick:
        _tell(progress, 0.25, "scheduler knobs")
        leaders = _best_per_engine(stage, KEEP_PER_ENGINE)
        stage += runner.run(((v, e.replicas) for e in leaders
                             for v in scheduler_variants(e.config)), coarse, "coarse")
        _tell(progress, 0.55, "prefix caching and speculative decoding")
        leaders = _best_per_engine(stage, KEEP_PER_ENGINE)
        stage += runner.run(((v, e.replicas) for e in leaders for v in feature_variants(
            e.config, hashes=hashes, speculative=spec)), coarse, "coarse")
    _tell(progress, 0.7, "finalists on the whole window")
    top = sorted(stage, key=lambda e: -e.score)[: (3 if quick else FINAL_TOP)]
    finalists = {(e.config.model_dump_json(), e.replicas): (e.config, e.replicas)
                 for e in [*top, *_best_per_engine(stage, 1 if quick else KEEP_PER_ENGINE)]}
    pairs = [*finalists.values(),
             *((c, r) for c in seeds for r in replica_choices(c, target.gpus, goals))]
    final = runner.run(pairs, requests, "full")
    _tell(progress, 0.85, "polishing on the whole window")
    leaders = sorted(final, key=lambda e: -e.score)[:1] if quick else _best_per_engine(final, 1)
    for leader in leaders:
        final += polish(leader, requests, runner, hashes=hashes, spec=spec)
    ranked = sorted({id(e): e for e in final}.values(), key=lambda e: -e.score)
    full = {(e.config.model_dump_json(), e.replicas): e for e in ranked}
    return SearchResult(ranked, runner.simulated, runner.pruned, spec, full)


def polish(best: Evaluation, requests: SimRequests, runner: _Runner, *, hashes: bool,
           spec: bool) -> list[Evaluation]:
    """Hill-climb one knob at a time on the whole window (POLISH_ROUNDS at most); the
    score's knob cost (`scoring.KNOB_COST`) lets a move back to a default win a near tie."""
    seen: list[Evaluation] = []
    for _ in range(POLISH_ROUNDS):
        pairs = [(c, best.replicas)
                 for c, _ in one_knob_variants(best.config, hashes=hashes, spec=spec)]
        if runner.goals.objective == "cost" and best.replicas > 1:
            pairs.append((best.config, best.replicas - 1))  # one GPU group fewer
        evals = runner.run(pairs, requests, "full")
        seen += evals
        better = max(evals, key=lambda e: e.score, default=None)
        if better is None or better.score <= best.score:
            break
        best = better
    return seen


def replica_choices(config: EngineConfig, gpus: int, goals: Goals) -> list[int]:
    """Replicas to try: all the GPUs; the cost objective also tries 1, 2, 4, ... fewer
    (polishing then steps down one at a time)."""
    most = max(1, gpus // config.gpus_per_instance)
    if goals.objective != "cost":
        return [most]
    return sorted({most, *(r for r in (1, 2, 4, 8, 16, 32) if r < most)})


def _tell(progress: Progress | None, fraction: float, what: str) -> None:
    if progress is not None:
        progress(fraction, what)
