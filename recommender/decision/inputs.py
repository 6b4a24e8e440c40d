"""What `recommend` is asked about, read from where the user keeps it: a trace file (ingested
and profiled into a workspace, its own requests simulated), a profile.json (a synthetic trace
with its shape), or a trace the caller has already ingested and profiled (the app's).

Owns turning those into the pair `recommend` takes, a `Profile` and the simulated `Workload`,
and the refusals of a source that states no arrival rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from core.errors import UsageError
from profiler.analysis.profile import profile_trace
from profiler.ingestion.options import IngestOptions
from profiler.schema import Profile
from profiler.workspace import Workspace
from recommender.decision.recommendation import RecommendRequest
from recommender.sim.trace_window import Workload, load_parquet_workload, load_workload

PROFILE_SNIFF_BYTES = 4096


class Inputs(NamedTuple):
    """A profile and the window of requests simulated for it (`synthetic`: drawn with the
    profile's shape, a profile.json having no per-request rows)."""

    profile: Profile
    workload: Workload
    synthetic: bool


def read_source(request: RecommendRequest, workspace: Workspace | None, tmp: Path) -> Inputs:
    """The request's source read: a profile.json as a synthetic trace of its shape, else a
    trace ingested into `workspace` (a new one under `tmp` when None) and profiled.

    Raises:
        ServeFitError: the source cannot be read, or it states no arrival rate and the
            request gives none.
    """
    profile = read_profile_json(request.source)
    if profile is not None:
        return _synthetic(profile, request, tmp)
    ws = workspace or Workspace(tmp / "workspace.duckdb")
    options = IngestOptions.model_validate(
        {"synthesize_arrivals_rps": request.arrival_rate_rps, "seed": request.seed})
    profile = profile_trace(request.source, workspace=ws, options=options, seed=request.seed)
    return ingested(profile, ws, request)


def ingested(profile: Profile, workspace: Workspace, request: RecommendRequest) -> Inputs:
    """A trace already ingested into `workspace` and profiled as `profile`: its busiest
    window of at most `request.max_requests` requests.

    Raises:
        UsageError: the trace has no timestamps, or all its requests arrive at one instant.
    """
    if profile.format.arrivals == "undefined":
        raise UsageError(f"{request.source}: the trace has no timestamps; give a request "
                         "rate for Poisson arrivals (--arrival-rate RPS)")
    if profile.mean_qps is None:  # timestamps, but all one instant: no rate to serve
        raise UsageError(f"{request.source}: its {profile.n_requests:,} request(s) arrive "
                         "at one instant (a span of 0 s), so the trace states no rate: "
                         "give a longer stretch of the log, or leave out its time column "
                         "and give a rate (--arrival-rate RPS)")
    return Inputs(profile, load_workload(workspace, max_requests=request.max_requests), False)


def _synthetic(profile: Profile, request: RecommendRequest, tmp: Path) -> Inputs:
    """A profile.json's synthetic trace: as many requests as it profiled (up to the cap),
    at its own arrivals, or Poisson at the request's rate when it has none."""
    from profiler.synthesis.synth import synthesize

    out = tmp / "synthetic.parquet"
    n = min(request.max_requests, max(profile.n_requests, 1))
    if profile.mean_qps is None and request.arrival_rate_rps is None:
        raise UsageError(f"{request.source}: the profile has no arrival times; give a "
                         "request rate for Poisson arrivals (--arrival-rate RPS)")
    synthesize(profile, n_requests=n, out_path=str(out), seed=request.seed,
               rate_rps=request.arrival_rate_rps if profile.mean_qps is None else None)
    workload = load_parquet_workload(str(out), max_requests=request.max_requests)
    workload.description = (f"a synthetic trace of {workload.n:,} requests with the profile's "
                            "shape (a profile.json has no per-request rows)")
    return Inputs(profile, workload, True)


def read_profile_json(source: str) -> Profile | None:
    """The Profile when `source` is a profile.json (a JSON object with `n_requests`).

    Raises:
        UsageError: it looks like a profile.json but is not a valid one.
    """
    try:
        with open(source, "rb") as fh:
            head = fh.read(PROFILE_SNIFF_BYTES)
    except OSError:
        return None  # profiling reports the unreadable file
    if not (head.lstrip().startswith(b"{") and b'"n_requests"' in head):
        return None
    from pydantic import ValidationError

    try:
        return Profile.model_validate_json(Path(source).read_text(encoding="utf-8"))
    except (ValidationError, UnicodeDecodeError, OSError) as exc:
        raise UsageError(f"{source}: not a valid profile.json ({str(exc).splitlines()[0]})"
                         ) from None
