"""Multi-turn sessions for a synthetic trace: which requests are turns of one session.

Each request is a turn of a multi-turn session with the profile's multi_turn_share; turns per
session and how many sessions interleave are assumed defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler.schema import Profile

DEFAULT_MEAN_TURNS = 4.0
SESSION_SPREAD = 8  # about this many multi-turn sessions are in progress at once


@dataclass(slots=True)
class Sessions:
    """The session model: the share of requests in multi-turn sessions, turns per session."""

    share: float
    mean_turns: float


def session_model(profile: Profile, mean_turns: float, notes: list[str]) -> Sessions | None:
    """The profile's session model (None without session ids), its choices noted in `notes`."""
    share = profile.multi_turn_share
    if share is None:
        notes.append("sessions: none (the profile has no session ids)")
        return None
    notes.append(
        f"sessions: each request is a turn of a multi-turn session with probability "
        f"{share:.3f} (the profile's multi_turn_share), else a one-request session; turns "
        f"per multi-turn session = 2 + geometric, mean {mean_turns:g} (assumed default, "
        f"mean_turns); turns take successive multi-turn arrivals, about {SESSION_SPREAD} "
        "sessions interleaved at a time (assumed)"
    )
    return Sessions(share=min(max(share, 0.0), 1.0), mean_turns=mean_turns)


def draw_sessions(model: Sessions, rng: Any, n: int, first_id: int) -> tuple[Any, Any]:
    """(session ids int64, multi-turn flags) for n consecutive requests; ids from first_id."""
    import numpy as np

    multi = rng.random(n) < model.share
    where = np.flatnonzero(multi)
    m = len(where)
    ids = np.empty(n, dtype=np.int64)
    n_sessions = 0
    if m >= 2:
        p = 1.0 / (model.mean_turns - 1.0)
        sizes = 1 + rng.geometric(p, size=int(m / model.mean_turns * 1.5) + 16)
        while sizes.sum() < m:
            sizes = np.concatenate([sizes, 1 + rng.geometric(p, size=len(sizes))])
        labels = np.repeat(np.arange(len(sizes)), sizes)[:m]
        if labels[-1] != labels[-2]:  # a cut-off one-turn session joins the one before
            labels[-1] = labels[-2]
        spread = SESSION_SPREAD * model.mean_turns
        labels = labels[np.argsort(np.arange(m) + rng.random(m) * spread, kind="stable")]
        ids[where] = first_id + labels
        n_sessions = int(labels.max()) + 1
    else:
        multi[:] = False
    singles = np.flatnonzero(~multi)
    ids[singles] = first_id + n_sessions + np.arange(len(singles))
    return ids, multi


