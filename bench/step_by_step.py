"""The simulator's baseline for the speed benchmarks (`sim_speed`, `recommend_speed`): every
kernel call with decode runs off (`recommender.sim.simulator.KernelSettings.decode_runs`), so
the loop takes each step itself. Same answers (tests/recommender/sim/kernel/test_decode_run.py
holds them equal); only the time differs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def step_by_step() -> Iterator[None]:
    """Within the block, every kernel call runs with decode runs off."""
    from recommender.sim.kernel import loop
    from recommender.sim.kernel.settings import I_DECODE_RUNS

    real = loop.run

    def run(req, icfg, *rest):
        icfg = icfg.copy()
        icfg[I_DECODE_RUNS] = 0
        return real(req, icfg, *rest)

    loop.run = run
    try:
        yield
    finally:
        loop.run = real
