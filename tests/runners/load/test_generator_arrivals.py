"""The arrival offsets the load generator is given (`runners.load.workloads.build_schedule` over
`core.arrivals`), tested by their properties, never draw for draw: the mean rate, the law and
dispersion of the gaps, exact per-phase counts, seed stability, sorted non-negative offsets.

Every statistical bound is set so that a correct generator fails it with probability below
1e-6 for a seed drawn at random (so a change of numpy's streams, or of the order of draws,
cannot plausibly fail a test); each test says how its bound gets there. Seeds are fixed, so a
run is deterministic.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from core.load import LoadSpec
from runners.load.schedule import Schedule
from runners.load.workloads import build_schedule
from tests.runners import loads
from tests.runners.loads import burst, poisson

ALPHA = 1e-7  # false-failure probability spent on one exact (or rigorous) bound
# For statistics that are only asymptotically normal (a sample CV): 6 standard errors have a
# normal tail of 2e-9, a margin of 500x for the statistic's skew (about 0.1 for Gamma gaps with
# CV 2 at these n, measured over 1,000 seeds) before reaching 1e-6.
Z = 6.0


def _at(schedule: Schedule) -> np.ndarray:
    return np.array([r.at_s for r in schedule.requests])


def _spec(kind: str, **fields: Any) -> LoadSpec:
    """The load of `kind` (its `tests.runners.loads` helper; 4-token prompts and outputs)."""
    return getattr(loads, kind)(**fields)


def _gaps(at: np.ndarray) -> np.ndarray:
    """Gaps of a count-mode renewal schedule, whose first arrival is one gap after 0."""
    return np.diff(np.concatenate([[0.0], at]))


def _cv_standard_error(cv: float, n: int) -> float:
    """Standard error of the sample CV of `n` i.i.d. Gamma gaps of CV `cv` (delta method:
    cv·√((1 + cv²) / 2n); tests/runners/load/test_workloads.py derives it)."""
    return cv * math.sqrt((1.0 + cv**2) / (2.0 * n))


def _dkw_bound(n: int) -> float:
    """ε with P(sup |F_n − F| > ε) ≤ ALPHA for `n` i.i.d. draws of a continuous law F
    (Dvoretzky–Kiefer–Wolfowitz with Massart's constant: 2·exp(−2nε²), for any n)."""
    return math.sqrt(math.log(2.0 / ALPHA) / (2.0 * n))


# (process, gamma_cv or None): Poisson is Gamma with CV 1 (shape 1); both bursty and regular.
PROCESSES = [("poisson", None), ("gamma", 0.5), ("gamma", 2.0)]


RATE_RPS, N = 40.0, 50_000


@functools.cache
def _count_mode(process: str, cv: float | None) -> np.ndarray:
    """Offsets of `N` arrivals at RATE_RPS (built once per process: a schedule of 50 k
    requests takes a third of a second)."""
    extra = {} if cv is None else {"cv": cv}
    return _at(build_schedule(_spec(kind=process, rate_rps=RATE_RPS, num_requests=N, seed=7,
                                    **extra)))


@pytest.mark.parametrize(("process", "cv"), PROCESSES)
def test_mean_rate_is_the_asked_rate(process, cv):
    rate, n = RATE_RPS, N
    at = _count_mode(process, cv)
    assert len(at) == n and at[0] > 0  # the first arrival is one gap after the start
    # The n-th arrival is the sum of n Gamma(k, 1/(rate·k)) gaps, k = 1/cv²: exactly
    # Gamma(n·k, 1/(rate·k)). Its central 1 − ALPHA interval is a band of ±2.4 % (Poisson)
    # to ±4.8 % (CV 2) around n / rate.
    k = 1.0 / (cv or 1.0) ** 2
    low, high = stats.gamma.ppf([ALPHA / 2, 1 - ALPHA / 2], n * k, scale=1.0 / (rate * k))
    assert low < at[-1] < high


@pytest.mark.parametrize(("process", "cv"), PROCESSES)
def test_gaps_follow_their_law_and_dispersion(process, cv):
    rate, n = RATE_RPS, N
    gaps = _gaps(_count_mode(process, cv))
    cv = cv or 1.0
    k = 1.0 / cv**2
    # The whole law: the gaps' empirical CDF stays within the DKW band (ε ≈ 0.013) of
    # Gamma(k, 1/(rate·k)) (the exponential law of mean 1/rate for Poisson).
    cdf = stats.gamma.cdf(np.sort(gaps), k, scale=1.0 / (rate * k))
    ecdf_hi = np.arange(1, n + 1) / n
    assert max(np.max(ecdf_hi - cdf), np.max(cdf - (ecdf_hi - 1.0 / n))) < _dkw_bound(n)
    # Dispersion: the gaps' CV is 1 for Poisson, the asked CV for Gamma (Z standard errors).
    assert abs(gaps.std() / gaps.mean() - cv) < Z * _cv_standard_error(cv, n)


def test_poisson_counts_over_a_duration_have_index_of_dispersion_one():
    rate, duration, bin_s = 200.0, 500.0, 0.5
    at = _at(build_schedule(poisson(rate, duration_s=duration, seed=5)))
    assert len(at) == round(rate * duration)  # duration mode offers exactly rate × duration
    counts = np.bincount((at / bin_s).astype(int), minlength=round(duration / bin_s))
    bins, mean = len(counts), counts.mean()
    assert bins == 1000 and mean == rate * bin_s
    # Given the count, bin counts are multinomial over equal bins: Pearson's statistic
    # (bins − 1)·(index of dispersion) is χ²(bins − 1) to a close approximation at 100 per
    # bin; the band is set at 1e-9 (not ALPHA) to leave the approximation's tail a 1,000x
    # margin. It is 0.75–1.30: bursty gaps (Gamma, CV 2) would give 4, even spacing 0.
    dispersion = counts.var(ddof=1) / mean
    low, high = stats.chi2.ppf([0.5e-9, 1 - 0.5e-9], bins - 1) / (bins - 1)
    assert low < dispersion < high


def test_burst_offers_each_phase_its_rate_and_is_poisson_within():
    spec = burst(50.0, 500.0, 40.0, 40.0, seed=2)
    sched = build_schedule(spec)
    at = _at(sched)
    phases = np.array([r.phase for r in sched.requests])
    for name, start, end, rate in [("steady", 0.0, 40.0, 50.0), ("burst", 40.0, 80.0, 500.0),
                                   ("recovery", 80.0, 120.0, 50.0)]:
        inside = at[phases == name]
        assert len(inside) == round(rate * (end - start))  # exactly its rate, by count
        assert np.all((inside >= start) & (inside < end))
        gaps = np.diff(inside)
        assert abs(gaps.std() / gaps.mean() - 1.0) < Z * _cv_standard_error(1.0, len(gaps))


SEEDED = [
    {"kind": "poisson", "rate_rps": 50.0, "num_requests": 500},
    {"kind": "poisson", "rate_rps": 50.0, "duration_s": 10.0},
    {"kind": "gamma", "rate_rps": 50.0, "cv": 2.0, "num_requests": 500},
    {"kind": "gamma", "rate_rps": 50.0, "cv": 0.5, "duration_s": 10.0},
    {"kind": "burst", "base_rate_rps": 20.0, "peak_rate_rps": 200.0, "steady_s": 2.0,
     "burst_s": 1.0},
]


@pytest.mark.parametrize("fields", SEEDED, ids=lambda f: "-".join(map(str, f.values())))
def test_seed_stability(fields):
    def schedule(seed: int) -> Schedule:
        return build_schedule(_spec(**fields, seed=seed))

    assert schedule(3).model_dump() == schedule(3).model_dump()  # same seed: identical
    a, b = _at(schedule(3)), _at(schedule(4))
    assert len(a) != len(b) or not np.array_equal(a, b)  # another seed: other offsets


@pytest.mark.parametrize("fields", SEEDED, ids=lambda f: "-".join(map(str, f.values())))
def test_offsets_are_sorted_non_negative_and_inside_the_run(fields):
    for seed in range(20):
        sched = build_schedule(_spec(**fields, seed=seed))
        at = _at(sched)
        assert len(at) > 0 and at[0] >= 0 and np.all(np.diff(at) >= 0)
        assert [r.index for r in sched.requests] == list(range(len(at)))
        end = sched.phases[-1].end_s
        assert at[-1] <= end and (at[-1] < end or "duration_s" not in fields)
