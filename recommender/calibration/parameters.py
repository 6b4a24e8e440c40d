"""The fitted parameters and where they sit in the optimiser's vector: which parameters are
fitted per engine (FITTED, their BOUNDS) and per GPU architecture (SCALES), `Layout` (the
vector, in log space, and the parameters it stands for) and `identified` (which entries the
rows of enough publisher families move). The solver that moves the entries is
`recommender.calibration.fitting`, not this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recommender.calibration.answers import log_values, run_key
from recommender.calibration.cal_row import CalRow
from recommender.catalog.lookup import get_gpu
from recommender.model.params import GpuScales, PerfParams

FITTED = ("compute_efficiency", "bandwidth_efficiency", "step_overhead_s", "per_seq_overhead_s",
          "serial_loop_seq_s", "request_overhead_s", "prefill_kernel_scale",
          "prefill_kernel_scale_tp8")
# Not fitted: EngineParams.closed_loop_gap_s. With it fitted the full leave-one-family-out run
# scored the same (21.8 % median, TTFT 42.3 % against 42.2 %, throughput 11.4 % against 10.8 %;
# data/calibration/README.md), so the model keeps the parameters it had.
BOUNDS = {  # (low, high) of each fitted parameter
    "compute_efficiency": (0.05, 1.0),
    "bandwidth_efficiency": (0.05, 1.0),
    # 10 ms: past what any engine's per-step CPU work takes; with 50 ms the fit spent the
    # overhead on what it cannot explain (SGLang's held-out 4-user TPOT came out 8x too slow).
    "step_overhead_s": (1e-5, 0.01),
    "per_seq_overhead_s": (1e-8, 1e-3),
    # 2 ms per sequence per step: 0.5 s a step at 256 sequences, past any release's Python.
    "serial_loop_seq_s": (1e-7, 2e-3),
    # Above what API work takes (the fit finds 0.1-0.2 s: queueing the model lacks); cut to
    # 50 ms, leave-one-family-out went 18.1 -> 20.1 % (TTFT 48.4 -> 46.7 %;
    # data/calibration/README.md), so the bound stays.
    "request_overhead_s": (1e-4, 0.5),
    # Measured tables only (the roofline ignores it): an engine release's prefill GEMMs from
    # twice as fast as the table's to three times as slow.
    "prefill_kernel_scale": (0.5, 3.0),
    "prefill_kernel_scale_tp8": (0.5, 3.0),
}
SCALES = ("compute_scale", "bandwidth_scale")
# A family's kernels reach at most the share of its datasheet peaks that Hopper's reach (the
# per-engine efficiencies are Hopper's); above 1 a scale would only absorb other errors.
SCALE_BOUNDS = (0.3, 1.0)
REFERENCE_ARCH = "hopper"  # GPU family whose datasheet peaks are taken as they are


@dataclass(slots=True, frozen=True)
class Layout:
    """Where each fitted parameter sits in the optimiser's vector (all in log space)."""

    engines: list[str]  # one FITTED block each, or one shared block when `shared`
    families: list[str]  # one SCALES block each
    shared: bool = False

    def params(self, base: PerfParams, x: np.ndarray) -> PerfParams:
        new, values = dict(base.engines), np.exp(x)
        n = len(FITTED)
        for j, engine in enumerate(self.engines):
            block = values[:n] if self.shared else values[n * j : n * j + n]
            new[engine] = base.engines[engine].model_copy(  # type: ignore[index]
                update=dict(zip(FITTED, block, strict=True)))
        off = (1 if self.shared else len(self.engines)) * n
        fams = dict(base.gpu_families)
        for j, fam in enumerate(self.families):
            a, b = values[off + 2 * j : off + 2 * j + 2]
            fams[fam] = GpuScales(compute_scale=float(min(a, 1.0)),
                                  bandwidth_scale=float(min(b, 1.0)))
        return base.model_copy(update={"engines": new, "gpu_families": fams})

    def start(self, base: PerfParams) -> np.ndarray:
        if self.shared:
            eng = [float(np.exp(np.mean([np.log(getattr(base.engines[e], f))  # type: ignore[index]
                                         for e in self.engines]))) for f in FITTED]
        else:
            eng = [getattr(base.engines[e], f) for e in self.engines for f in FITTED]  # type: ignore[index]
        fam = [getattr(base.scales_for(a), f) for a in self.families for f in SCALES]
        return np.log(np.array(eng + fam, dtype=float))

    def columns(self, row: CalRow) -> list[int]:
        """The entries of x the row's prediction depends on: its engine's block (the shared
        block when `shared`) and its GPU architecture's scales; every other entry leaves it
        exactly unchanged (`params` writes them to other engines and architectures)."""
        n = len(FITTED)
        cols: list[int] = []
        if self.shared:
            cols += list(range(n))
        elif row.engine in self.engines:
            j = self.engines.index(row.engine)
            cols += list(range(n * j, n * j + n))
        arch = arch_of(row)
        if arch in self.families:
            off = (1 if self.shared else len(self.engines)) * n + 2 * self.families.index(arch)
            cols += [off, off + 1]
        return cols

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        blocks = 1 if self.shared else len(self.engines)
        lo = [BOUNDS[f][0] for _ in range(blocks) for f in FITTED]
        hi = [BOUNDS[f][1] for _ in range(blocks) for f in FITTED]
        lo += [SCALE_BOUNDS[0]] * len(self.families) * len(SCALES)
        hi += [SCALE_BOUNDS[1]] * len(self.families) * len(SCALES)
        return np.log(lo), np.log(hi)


def arch_of(row: CalRow) -> str:
    """The architecture of the row's GPU: the family whose SCALES it is predicted with."""
    return get_gpu(row.gpu).architecture


MIN_IDENTIFYING_FAMILIES = 2  # a parameter fewer families move keeps its prior
IDENTIFY_STEP = 0.05  # log-step a parameter is moved by to see which rows it moves
IDENTIFY_TOL = 1e-4  # |change of a row's log error| that counts as moved


def identified(rows: list[CalRow], base: PerfParams, layout: Layout, x: np.ndarray
               ) -> np.ndarray:
    """Which entries of `x` the rows of at least MIN_IDENTIFYING_FAMILIES publisher families
    move (a row is moved when its log prediction changes by more than IDENTIFY_TOL for a
    IDENTIFY_STEP log-step of the parameter). A parameter that one family alone identifies
    would carry that family's habits (its harness, client, builds) to everyone else."""
    keys = [run_key(r) for r in rows]

    def logs(v: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return log_values(rows, keys, idx, layout.params(base, v))

    families = np.array([r.family for r in rows])
    deps = dependents(rows, layout, len(x))
    at = logs(x, np.arange(len(rows)))
    free = np.zeros(len(x), dtype=bool)
    for j in range(len(x)):
        step = x.copy()
        step[j] += IDENTIFY_STEP
        moved = deps[j][np.abs(logs(step, deps[j]) - at[deps[j]]) > IDENTIFY_TOL]
        free[j] = len(set(families[moved])) >= MIN_IDENTIFYING_FAMILIES
    return free


def dependents(rows: list[CalRow], layout: Layout, size: int) -> list[np.ndarray]:
    """Per entry of x, the indices of the rows whose prediction depends on it."""
    deps: list[list[int]] = [[] for _ in range(size)]
    for i, r in enumerate(rows):
        for j in layout.columns(r):
            deps[j].append(i)
    return [np.array(d, dtype=int) for d in deps]
