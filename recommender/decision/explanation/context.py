"""What explanations and warnings look at: the request, the profile, the simulated window, the
target and goals, the search's result and the decision, and the pick's counterfactual.

Every reason that claims an effect is backed by a counterfactual simulation (`what_if`: the
pick with one knob back at its alternative) on the same window.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import UsageError
from profiler.schema import Profile
from recommender.decision.goals import Goals, Target
from recommender.decision.recommendation import Decision, RecommendRequest
from recommender.decision.scoring import Evaluation, evaluate
from recommender.decision.search import SearchResult
from recommender.sim.trace_window import Workload


@dataclass(slots=True)
class Context:
    """Everything explanations and warnings look at."""

    request: RecommendRequest
    profile: Profile
    workload: Workload
    target: Target
    goals: Goals
    result: SearchResult
    synthetic: bool
    decision: Decision | None = None  # how the pick was chosen (recommender.decision.decide)

    @property
    def best(self) -> Evaluation:
        return self.result.ranked[0]

    def what_if(self, **update: object) -> Evaluation | None:
        """The pick with `update` applied, simulated on the same window (None: cannot run)."""
        config = self.best.config.model_copy(update=update)
        if config == self.best.config:
            return None
        seen = self.result.full.get((config.model_dump_json(), self.best.replicas))
        if seen is not None:
            return seen
        try:
            return evaluate(config, self.workload.requests, self.best.replicas, self.target,
                            self.goals)
        except UsageError:
            return None
