"""The Context `recommend` builds for a seeded trace a test writes: the real profiler, the whole
window and the real search, for the target and goals the test states (the routing and caveats
tests build theirs with it)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from profiler.analysis.profile import profile_trace
from profiler.workspace import Workspace
from recommender.decision.explanation.context import Context
from recommender.decision.goals import Goals, Target
from recommender.decision.recommendation import RecommendRequest
from recommender.decision.search import search
from recommender.sim.trace_window import head_window, load_workload


def seeded_context(folder: Path, requests: pd.DataFrame, target: Target, goals: Goals
                   ) -> Context:
    """`requests` (arrival_s, input_tokens, output_tokens) written to a Parquet trace in
    `folder`, profiled into a workspace there and searched whole for `target` under `goals`."""
    trace = folder / "trace.parquet"
    requests.to_parquet(trace)
    ws = Workspace.resolve(folder / "w.duckdb")
    profile = profile_trace(str(trace), workspace=ws, lru_capacities=[])
    workload = load_workload(ws, max_requests=len(requests))
    result = search(workload.requests, head_window(workload.requests, len(requests)), target,
                    goals)
    request = RecommendRequest(source=str(trace), gpu=target.gpu.name, model=target.model.name,
                               gpus=target.gpus)
    return Context(request=request, profile=profile, workload=workload, target=target,
                   goals=goals, result=result, synthetic=False)
