"""The pick among each engine's best candidate: ranked by what the objective values, ties
called within the prediction's error, and broken by stated rules.

Owns the ranking figure per objective, the tie test and the tie-break order:
- goodput: the SLO boundary found on the user's own trace
  (`recommender.decision.capacity.boundary`), per GPU: at today's load every configuration
  that keeps up serves exactly the offered rate, so the load each one still holds is what
  tells them apart (headroom);
- latency: the latency objective's figure (`scoring.latency_s`), lower first;
- cost: the output tokens the SLO boundary serves per GPU-hour: one GPU type and price per
  recommendation, so the inverse of $/Mtok at the boundary
  (`recommender.decision.capacity.pricing`).
Two contenders are tied when their figures differ (in log) by less than the combined
half-widths of their p10-p90 intervals, errors taken as independent:
|ln(a / b)| < sqrt(h_a² + h_b²), h = ln(high / low) / 2 of the figure's interval group. A
contender without an interval (no calibration data at all) ties with any other: nothing
says the difference is real. Among the pick's ties the order is headroom (higher SLO
boundary per GPU), fewer GPUs, calibrated over uncalibrated, the simpler configuration
(fewer knobs set), then the search's order; the decision names the rule that decided.
Infeasible candidates never contend while a feasible one exists. The confidence is the
probability that the pick beats the runner-up on the figure once each figure's error is
drawn from its interval group's cross-validated errors (`bands.draw_errors`, seeded Monte
Carlo, the two errors independent). No simulation here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.capacity import Boundary
from recommender.calibration.bands import draw_errors
from recommender.calibration.bands_file import BANDS_FILE
from recommender.decision.recommendation import Decision, Objective, TieRule
from recommender.decision.scoring import Evaluation, knobs_set, latency_s
from recommender.model.steptime import DEFAULT_KIND

# The interval group each objective's figure takes its error from (`Interval.metric`): the
# boundary is a load, off by as much as the throughput it rests on; the latency objective is
# a request's time.
FIGURE_GROUP: dict[Objective, str] = {"goodput": "throughput", "latency": "e2e",
                                      "cost": "throughput"}
RANKED_BY: dict[Objective, str] = {
    "goodput": "SLO boundary per GPU on the trace (req/s the configuration still holds)",
    "latency": "p95 TTFT + p95 TPOT x (mean output - 1)",
    "cost": "million output tokens per GPU-hour at the SLO boundary (1 / its $/Mtok at one "
            "price)",
}
# Figures at or below this are taken as this (a boundary of 0: nothing held), so logs stay
# finite and two zeros tie.
FLOOR = 1e-9
CONFIDENCE_DRAWS = 20_000  # Monte Carlo draws: the probability's standard error < 0.4 %


@dataclass(frozen=True, slots=True)
class Contender:
    """One engine's best candidate with its label and, where searched, its SLO boundary."""

    evaluation: Evaluation
    label: str
    boundary: Boundary | None

    @property
    def headroom_per_gpu(self) -> float:
        return 0.0 if self.boundary is None else self.boundary.rate_rps / self.boundary.gpus

    @property
    def calibrated(self) -> bool:
        return self.evaluation.predicted.band is not None


def figure(c: Contender, objective: Objective, mean_output_tokens: float) -> float:
    """The objective's ranking figure of `c` (higher is better for goodput and cost, lower
    for latency)."""
    if objective == "goodput":
        return c.headroom_per_gpu
    if objective == "latency":
        return latency_s(c.evaluation.predicted, mean_output_tokens)
    return c.headroom_per_gpu * mean_output_tokens * 3600.0 / 1e6


def half_width(c: Contender, objective: Objective) -> float | None:
    """Half the log width of the figure's p10-p90 interval; None without one."""
    found = c.evaluation.predicted.intervals.get(FIGURE_GROUP[objective])
    return None if found is None else math.log(found.high / found.low) / 2.0


def tied(a: Contender, b: Contender, objective: Objective, mean_output_tokens: float) -> bool:
    """The two figures differ by less than their combined error (module docstring)."""
    ha, hb = half_width(a, objective), half_width(b, objective)
    if ha is None or hb is None:
        return True
    fa = max(figure(a, objective, mean_output_tokens), FLOOR)
    fb = max(figure(b, objective, mean_output_tokens), FLOOR)
    return abs(math.log(fa / fb)) < math.hypot(ha, hb)


# Tie-break keys in order (smaller first) and the rule each one is named by.
_BREAKS: tuple[tuple[TieRule, str], ...] = (
    ("headroom", "the higher SLO boundary per GPU"),
    ("fewer_gpus", "fewer GPUs"),
    ("calibrated", "calibrated over uncalibrated"),
    ("simpler", "the simpler configuration (fewer knobs set)"),
)


def _break_key(c: Contender) -> tuple[float, int, int, int]:
    return (-c.headroom_per_gpu, c.evaluation.gpus, 0 if c.calibrated else 1,
            knobs_set(c.evaluation.config))


def confidence(pick: Contender, runner: Contender, objective: Objective,
               mean_output_tokens: float, *, seed: int, step_time: str = DEFAULT_KIND,
               bands_file: str | Path = BANDS_FILE) -> float | None:
    """P(the pick's figure beats the runner-up's) with each figure times exp(its drawn
    error); None when either has no interval to draw from."""
    group = FIGURE_GROUP[objective]
    a, b = (c.evaluation.predicted.intervals.get(group) for c in (pick, runner))
    if a is None or b is None:
        return None
    rng = np.random.default_rng(seed)
    ea, eb = (draw_errors(i, rng, CONFIDENCE_DRAWS, bands_file=bands_file,
                          step_time=step_time) for i in (a, b))
    fa = max(figure(pick, objective, mean_output_tokens), FLOOR) * np.exp(ea)
    fb = max(figure(runner, objective, mean_output_tokens), FLOOR) * np.exp(eb)
    wins = fa < fb if objective == "latency" else fa > fb
    return float(np.mean(wins))


def decide(contenders: Sequence[Contender], objective: Objective, mean_output_tokens: float,
           *, seed: int = 0, step_time: str = DEFAULT_KIND,
           bands_file: str | Path = BANDS_FILE) -> tuple[list[Contender], Decision]:
    """(the contenders in the decided order, the decision). `contenders` come in the
    search's order; the feasible ones are ranked by the objective's figure, the pick's ties
    broken by `_BREAKS`, the infeasible ones follow in their order; the confidence is the
    pick's against the first other engine's contender."""
    if not contenders:
        raise ValueError("decide needs at least one contender")
    feasible = [c for c in contenders if c.evaluation.feasible]
    if not feasible:
        return _none_feasible(contenders, objective, mean_output_tokens)
    lower_better = objective == "latency"
    by_figure = sorted(feasible, key=lambda c: figure(c, objective, mean_output_tokens)
                       * (1 if lower_better else -1))
    leader = by_figure[0]
    ties = [c for c in by_figure[1:] if tied(leader, c, objective, mean_output_tokens)]
    group = sorted([leader, *ties], key=_break_key)  # stable: the figure's order last
    rest = [c for c in by_figure if c not in group]
    ordered = group + rest + [c for c in contenders if c not in feasible]
    rule, how = _rule(group)
    figures = {c.label: figure(c, objective, mean_output_tokens) for c in contenders}
    pick = ordered[0]
    runner = next((c for c in ordered[1:] if c in feasible
                   and c.evaluation.config.engine != pick.evaluation.config.engine), None)
    p = None if runner is None else confidence(
        pick, runner, objective, mean_output_tokens, seed=seed, step_time=step_time,
        bands_file=bands_file)
    text = _text(pick, group, how, objective, mean_output_tokens)
    if p is not None and runner is not None:
        text += f"; P(it beats {runner.label} once the error is drawn) = {p:.0%}"
    return ordered, Decision(
        objective=objective, pick=pick.label, ranked_by=RANKED_BY[objective],
        figures=figures, tied_with=[c.label for c in group[1:]], rule=rule,
        runner_up=None if runner is None else runner.label, confidence=p, text=text)


def _none_feasible(contenders: Sequence[Contender], objective: Objective,
                   mean_output_tokens: float) -> tuple[list[Contender], Decision]:
    """No contender keeps up and serves every request: no boundary tells them apart (none
    holds even today's load), so they keep the search's score order (the share served
    within the limits first)."""
    ordered = sorted(contenders, key=lambda c: -c.evaluation.score)
    pick = ordered[0]
    return ordered, Decision(
        objective=objective, pick=pick.label, ranked_by="the search's score (no "
        "configuration holds today's load)",
        figures={c.label: c.evaluation.score for c in contenders}, tied_with=[],
        rule="infeasible", runner_up=None, confidence=None,
        text=(f"no configuration searched keeps up with the load and serves every request "
              f"({pick.evaluation.rejected_reason}): {pick.label} is the closest by the "
              f"search's score, not a configuration to deploy as it is"))


def _rule(group: list[Contender]) -> tuple[TieRule, str]:
    """The first tie-break that sets the pick apart from its runner-up in the tie group."""
    if len(group) == 1:
        return "figure", "a clear lead"
    a, b = _break_key(group[0]), _break_key(group[1])
    for i, (rule, how) in enumerate(_BREAKS):
        if a[i] != b[i]:
            return rule, how
    return "order", "the search's order (nothing else tells them apart)"


def _text(pick: Contender, group: list[Contender], how: str, objective: Objective,
          mean_output_tokens: float) -> str:
    value = _figure_text(pick, objective, mean_output_tokens)
    if len(group) == 1:
        return f"{pick.label} leads on {RANKED_BY[objective]}: {value}, beyond the error"
    others = ", ".join(f"{c.label} ({_figure_text(c, objective, mean_output_tokens)})"
                       for c in group[1:])
    return (f"{pick.label} ({value}) is tied within the prediction's error with {others}; "
            f"decided by {how}")


def _figure_text(c: Contender, objective: Objective, mean_output_tokens: float) -> str:
    if objective == "goodput":
        if c.boundary is None:
            return "no boundary"
        gpus = c.boundary.gpus
        return (f"{'at least ' if c.boundary.capped else ''}{c.boundary.rate_rps:,.3g} req/s"
                + (f" on {gpus} GPUs" if gpus > 1 else " on 1 GPU"))
    if objective == "latency":
        return f"{figure(c, objective, mean_output_tokens) * 1e3:,.0f} ms"
    return f"{figure(c, objective, mean_output_tokens):,.3g} Mtok per GPU-hour"
