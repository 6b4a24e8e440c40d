"""How reasons and warnings state a figure: a latency in ms or s ("never" where no request
completed), a p95 against its counterfactual's, and the pick's effect against a
counterfactual (the objective's latency, p95 TTFT and TPOT, unservable requests).
"""

from __future__ import annotations

from recommender.decision.explanation.context import Context
from recommender.decision.scoring import Evaluation


def ms_text(seconds: float | None) -> str:
    """A latency in ms; "never" where it has no value (no request completed)."""
    return "never" if seconds is None else f"{seconds * 1e3:,.0f} ms"


def s_text(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f} s"


def p95_vs(name: str, a: Evaluation, b: Evaluation) -> str:
    """'p95 TTFT 120 ms (vs 480 ms)' for the figure `name` ('ttft' or 'tpot')."""
    x, y = getattr(a.predicted, f"{name}_s").p95, getattr(b.predicted, f"{name}_s").p95
    return f"p95 {name.upper()} {ms_text(x)} (vs {ms_text(y)})"


def effect_text(ctx: Context, a: Evaluation, b: Evaluation) -> str:
    """The pick against its counterfactual: the objective's latency, p95 TTFT and TPOT, and
    requests that could not be served."""
    text = (f"p95 E2E {s_text(a.predicted.e2e_s.p95)} (vs {s_text(b.predicted.e2e_s.p95)}), "
            f"{p95_vs('ttft', a, b)}, {p95_vs('tpot', a, b)}")
    ra, rb = a.predicted.rejected_requests, b.predicted.rejected_requests
    if ra != rb:
        text += f", {ra} unservable requests (vs {rb})"
    return text
