"""`core.arrivals`: counts, order, rates and dispersion of the processes, checked against
their definitions with numpy statistics (tolerances several standard errors wide)."""

from __future__ import annotations

import numpy as np
import pytest

from core.arrivals import exact_count_poisson, gaps, renewal_times


def _rng(seed: int = 1) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_poisson_gaps_are_exponential_with_mean_one_over_rate():
    g = gaps(_rng(), 200_000, rate_rps=4.0)
    assert len(g) == 200_000 and np.all(g > 0)
    # Exponential: mean 1/rate, sd = mean; standard error of the mean 0.25 / sqrt(n).
    assert abs(g.mean() - 0.25) < 5 * 0.25 / np.sqrt(len(g))
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_gaps_have_the_asked_cv_and_rate(cv):
    g = gaps(_rng(2), 400_000, rate_rps=10.0, process="gamma", cv=cv)
    assert g.mean() == pytest.approx(0.1, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.03)


def test_renewal_by_count_is_sorted_and_starts_after_start():
    t = renewal_times(_rng(), 2.0, count=1_000, start_s=100.0)
    assert len(t) == 1_000
    assert np.all(np.diff(t) > 0) and t[0] > 100.0


def test_renewal_by_end_has_the_mean_rate():
    rate, span = 50.0, 2_000.0
    t = renewal_times(_rng(3), rate, start_s=10.0, end_s=10.0 + span)
    assert np.all(np.diff(t) > 0) and t[0] >= 10.0 and t[-1] < 10.0 + span
    # Poisson count over the span: mean rate*span, sd sqrt(rate*span).
    assert abs(len(t) - rate * span) < 5 * np.sqrt(rate * span)


def test_renewal_cut_at_both_count_and_end():
    t = renewal_times(_rng(), 10.0, count=5, end_s=1_000.0)
    assert len(t) == 5
    t = renewal_times(_rng(), 10.0, count=10_000, end_s=1.0)
    assert len(t) < 100 and np.all(t < 1.0)


def test_renewal_past_the_first_draw_continues_the_same_stream():
    # Bursty gaps at 1 req/s over 30 s: the first batch (about 1.2 x the expected count, plus
    # 16: 52 gaps) falls short of the end for some seeds, which must draw on, continuing the
    # same stream: the result is one long stream of Gamma gaps, cut at the end.
    shape = 1.0 / 3.0**2
    short = 0
    for seed in range(40):
        stream = np.cumsum(_rng(seed).gamma(shape, 1.0 / shape, 5_000))
        short += stream[51] < 30.0
        t = renewal_times(_rng(seed), 1.0, end_s=30.0, process="gamma", cv=3.0)
        np.testing.assert_allclose(t, stream[stream < 30.0], rtol=1e-12)
    assert short > 0  # the case this test is about did occur


def test_gamma_renewal_has_the_target_cv():
    t = renewal_times(_rng(5), 20.0, count=300_000, process="gamma", cv=1.8)
    g = np.diff(t)
    assert g.std() / g.mean() == pytest.approx(1.8, rel=0.03)
    assert 1.0 / g.mean() == pytest.approx(20.0, rel=0.02)


def test_first_at_start_puts_the_first_arrival_at_start():
    for kwargs in ({"count": 100}, {"end_s": 107.0}):
        t = renewal_times(_rng(), 3.0, start_s=7.0, first_at_start=True, **kwargs)
        assert t[0] == pytest.approx(7.0, abs=1e-12) and np.all(np.diff(t) > 0)
    late = renewal_times(_rng(), 3.0, start_s=7.0, end_s=107.0)
    assert late[0] > 7.0


def test_needs_a_count_or_an_end():
    with pytest.raises(ValueError, match="count or end_s"):
        renewal_times(_rng(), 1.0)


def test_seeded_draws_reproduce():
    a = renewal_times(_rng(11), 5.0, end_s=100.0, process="gamma", cv=1.5)
    b = renewal_times(_rng(11), 5.0, end_s=100.0, process="gamma", cv=1.5)
    c = renewal_times(_rng(12), 5.0, end_s=100.0, process="gamma", cv=1.5)
    assert np.array_equal(a, b) and not np.array_equal(a[:10], c[:10])
    assert np.array_equal(exact_count_poisson(_rng(11), 9.0, 0.0, 10.0),
                          exact_count_poisson(_rng(11), 9.0, 0.0, 10.0))


@pytest.mark.parametrize(("rate", "start", "end"), [(1_000.0, 0.0, 10.0), (3.3, 2.0, 5.0),
                                                     (0.04, 0.0, 10.0)])
def test_exact_count_is_round_rate_times_span(rate, start, end):
    t = exact_count_poisson(_rng(), rate, start, end)
    assert len(t) == round(rate * (end - start))
    assert np.all(np.diff(t) >= 0) and np.all((t >= start) & (t < end))


def test_exact_count_gaps_are_exponential():
    t = exact_count_poisson(_rng(6), 1_000.0, 0.0, 200.0)
    g = np.diff(t)
    assert g.mean() == pytest.approx(1e-3, rel=0.01)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.02)
