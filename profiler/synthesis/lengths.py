"""Joint (input, output) token lengths for a synthetic trace, drawn like the profile's.

A Gaussian mixture in (ln(1 + input), ln(1 + output)), one component per length segment of the
profile, whose marginals are then mapped onto the profile's p50/p90/p99 and clipped to its
ranges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.errors import UsageError
from profiler.schema import Profile

_QUANTILE_LEVELS = (0.5, 0.9, 0.99)
_PILOT_ROWS = 200_000


@dataclass(slots=True)
class Lengths:
    """Gaussian mixture in (ln(1 + input), ln(1 + output)), then a marginal quantile map."""

    cum_share: Any
    mean: Any  # (segments, 2)
    chol: Any  # (segments, 3): l00, l10, l11 of the lower-triangular factor
    bounds: tuple[tuple[float, float], tuple[float, float]]
    knots: list[tuple[Any, Any] | None]  # per side: mixture quantiles -> profile quantiles


def length_model(profile: Profile, rng: Any, notes: list[str]) -> Lengths:
    """The profile's length model (quantile knots from a pilot draw), its choices noted."""
    import numpy as np

    segs = profile.segments
    if not segs:
        raise UsageError("the profile has no length segments: re-profile the trace")
    share = np.array([max(s.share, 0.0) for s in segs])
    stats = (profile.input_tokens, profile.output_tokens)
    model = Lengths(
        cum_share=np.cumsum(share) / share.sum(),
        mean=np.array([[s.log_input_mean, s.log_output_mean] for s in segs]),
        chol=np.array([_chol2(s.log_cov) for s in segs]),
        bounds=((stats[0].min, stats[0].max), (stats[1].min, stats[1].max)),
        knots=[None, None],
    )
    pilot = _mixture_logs(model, rng, _PILOT_ROWS)
    for side, (x, st) in enumerate(zip(pilot, stats, strict=True)):
        xk = np.quantile(x, _QUANTILE_LEVELS)
        yk = np.log1p([st.p50, st.p90, st.p99])
        if np.all(np.diff(xk) > 0) and np.all(np.diff(yk) >= 0):
            model.knots[side] = (xk, yk)
    notes.append(
        f"lengths: {len(segs)} segment(s) drawn by share, each a bivariate normal in "
        "(ln(1+input), ln(1+output)) with the segment's mean and covariance; each marginal "
        "then mapped (monotone, piecewise linear in log space) onto the profile's p50/p90/p99, "
        f"rounded and clipped to the profile's ranges (input {stats[0].min:g}..{stats[0].max:g}"
        f", output {stats[1].min:g}..{stats[1].max:g})"
    )
    return model


def _chol2(cov: list[list[float]]) -> tuple[float, float, float]:
    """Lower-triangular factor of a 2x2 covariance, tolerant of (near-)singular ones."""
    v00, v01, v11 = max(cov[0][0], 0.0), cov[0][1], max(cov[1][1], 0.0)
    l00 = math.sqrt(v00)
    l10 = v01 / l00 if l00 > 0 else 0.0
    return l00, l10, math.sqrt(max(v11 - l10 * l10, 0.0))


def _mixture_logs(model: Lengths, rng: Any, n: int) -> tuple[Any, Any]:
    import numpy as np

    seg = np.minimum(np.searchsorted(model.cum_share, rng.random(n), side="right"),
                     len(model.cum_share) - 1)
    z = rng.standard_normal((2, n))
    mean, chol = model.mean[seg], model.chol[seg]
    return (mean[:, 0] + chol[:, 0] * z[0], mean[:, 1] + chol[:, 1] * z[0] + chol[:, 2] * z[1])


def draw_lengths(model: Lengths, rng: Any, n: int) -> tuple[Any, Any]:
    """(input_tokens, output_tokens) as int32 arrays of length n."""
    import numpy as np

    out = []
    for logs, knots, (lo, hi) in zip(_mixture_logs(model, rng, n), model.knots, model.bounds,
                                     strict=True):
        x = logs if knots is None else _remap(logs, *knots)
        tokens = np.rint(np.expm1(x, out=x), out=x)
        out.append(np.clip(tokens, lo, hi, out=tokens).astype(np.int32))
    return out[0], out[1]


def _remap(x: Any, xk: Any, yk: Any) -> Any:
    """Piecewise-linear map through knots xk -> yk; beyond the ends, shifted like the ends."""
    import numpy as np

    inner = np.interp(x, xk, yk)
    return np.where(x < xk[0], x + (yk[0] - xk[0]),
                    np.where(x > xk[-1], x + (yk[-1] - xk[-1]), inner))


