"""Which engine computes a trace's profile: plug-ins keyed by `kind` (`duckdb`, `spark`).

Every backend computes the same `Profile` from the same queries (`profiler.analysis.figures`);
they differ in where the rows live. Each is imported only when chosen, so the DuckDB path loads
nothing of Spark's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from core.errors import UsageError

if TYPE_CHECKING:  # the CLI reads BACKENDS to build its parser: keep this import-light
    from profiler.schema import Profile

DEFAULT_BACKEND = "duckdb"


def _duckdb(path: str, *, workspace: Any, options: Any, lru_capacities: Sequence[int],
            seed: int, master: str | None) -> Profile:
    from profiler.analysis.profile import profile_trace

    if master is not None:
        raise UsageError("--spark-master needs --backend spark")
    return profile_trace(path, workspace=workspace, options=options,
                         lru_capacities=lru_capacities, seed=seed)


def _spark(path: str, *, workspace: Any, options: Any, lru_capacities: Sequence[int],
           seed: int, master: str | None) -> Profile:
    from profiler.analysis.spark_backend import profile_trace_spark

    return profile_trace_spark(path, workspace=workspace, options=options,
                               lru_capacities=lru_capacities, seed=seed, master=master)


BACKENDS: dict[str, Callable[..., Profile]] = {"duckdb": _duckdb, "spark": _spark}


def profile_with(
    kind: str,
    path: str,
    *,
    workspace: Any,
    options: Any = None,
    lru_capacities: Sequence[int],
    seed: int = 0,
    master: str | None = None,
) -> Profile:
    """Profile `path` with backend `kind`; `master` is the Spark master URL (Spark only).

    Raises:
        UsageError: unknown backend, or an option the backend does not take.
        TraceError: the trace cannot be read or holds invalid requests.
    """
    backend = BACKENDS.get(kind)
    if backend is None:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, not {kind!r}")
    return backend(path, workspace=workspace, options=options, lru_capacities=lru_capacities,
                   seed=seed, master=master)
