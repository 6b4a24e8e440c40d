"""One browser session's state (st.session_state): its trace, its recommendation, and what
it profiled, recommended and ran itself. A session lists only its own history unless
`$SERVEFIT_SHARED_HISTORY` says otherwise (README, "Sessions: who sees what").
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st
from pydantic import Field

from app.storage import TraceChoice, sample_choice
from core.errors import UsageError
from core.records import Record

TRACE_KEY = "servefit.trace"
RECOMMENDATION_KEY = "servefit.recommendation"
RECOMMENDED_FOR_KEY = "servefit.recommendation.trace"  # digest of the trace it was made on
PENDING_KEY = "servefit.start.pending"  # an upload not yet read successfully
OWNED_KEY = "servefit.owned"
SHARED_HISTORY_ENV_VAR = "SERVEFIT_SHARED_HISTORY"


def current_trace() -> TraceChoice:
    """The session's trace; the bundled sample until the user picks another."""
    choice = st.session_state.get(TRACE_KEY)
    if choice is None:
        choice = st.session_state[TRACE_KEY] = sample_choice()
    return choice


def keep_recommendation(trace_digest: str, rec: Any) -> None:
    """Make `rec`, made on the trace of `trace_digest`, the session's recommendation."""
    st.session_state[RECOMMENDATION_KEY] = rec
    st.session_state[RECOMMENDED_FOR_KEY] = trace_digest


def current_recommendation() -> Any:
    """The session's recommendation when it was made on the current trace, else None: after
    another trace is chosen, the views must not show the previous trace's pick under the new
    trace's name."""
    rec = st.session_state.get(RECOMMENDATION_KEY)
    if rec is None or st.session_state.get(RECOMMENDED_FOR_KEY) != current_trace().digest:
        return None
    return rec


class Owned(Record):
    """What this browser session profiled, recommended and ran (kept in st.session_state)."""

    profiles: set[tuple[str, str]] = Field(default_factory=set,
                                           description="(content digest, options JSON)")
    recommendations: set[str] = Field(default_factory=set, description="recommendation ids")
    runs: set[str] = Field(default_factory=set, description="benchmark run ids")


def owned() -> Owned:
    owned = st.session_state.get(OWNED_KEY)
    if owned is None:
        owned = st.session_state[OWNED_KEY] = Owned()
    return owned


def shared_history() -> bool:
    """Whether every session sees the whole store ($SERVEFIT_SHARED_HISTORY; default no:
    a session sees what it profiled, recommended and ran itself).

    Raises:
        UsageError: the variable holds something other than a yes or a no.
    """
    raw = os.environ.get(SHARED_HISTORY_ENV_VAR, "").strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"", "0", "false", "no", "off"}:
        return False
    raise UsageError(f"${SHARED_HISTORY_ENV_VAR}={raw!r}: expected 1 or 0 (true or false)")


def remember_run(run_id: str) -> None:
    """Count a benchmark run this session started as its own."""
    owned().runs.add(run_id)


def visible_profiles(entries: list[Any]) -> list[Any]:
    """The profile-history entries this session may see and open."""
    if shared_history():
        return entries
    mine = owned().profiles
    return [e for e in entries if (e.trace_digest, e.options_json) in mine]


def visible_recommendations(entries: list[Any]) -> list[Any]:
    """The saved recommendations this session may see and open."""
    if shared_history():
        return entries
    mine = owned().recommendations
    return [e for e in entries if e.rec_id in mine]


def visible_runs(runs: list[Any]) -> list[Any]:
    """The benchmark runs this session may see and compare."""
    if shared_history():
        return runs
    mine = owned().runs
    return [r for r in runs if r.run_id in mine]
