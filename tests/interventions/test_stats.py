"""Intervals and paired tests of intervention studies against scipy's implementations and by-hand cases."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.interventions import stats

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy is the independent reference for these intervals")


@pytest.mark.parametrize(("hits", "n"), [(0, 32), (2, 32), (16, 32), (31, 32), (150, 210)])
def test_wilson_matches_scipy(hits, n):
    reference = scipy_stats.binomtest(hits, n).proportion_ci(confidence_level=0.95, method="wilson")
    estimate = stats.wilson(hits, n)
    assert estimate["value"] == pytest.approx(hits / n)
    assert (estimate["low"], estimate["high"]) == pytest.approx((reference.low, reference.high), abs=1e-9)


@pytest.mark.parametrize(("only_first", "only_second"), [(0, 3), (5, 1), (9, 9), (12, 2)])
def test_mcnemar_is_the_exact_binomial_test_on_discordant_pairs(only_first, only_second):
    first = [1] * only_first + [0] * only_second + [1] * 4 + [0] * 5
    second = [0] * only_first + [1] * only_second + [1] * 4 + [0] * 5
    expected = scipy_stats.binomtest(only_first, only_first + only_second, 0.5).pvalue
    assert stats.mcnemar(first, second) == pytest.approx(expected)


def test_bootstrap_interval_covers_the_t_interval_roughly_and_sign_flip_separates_shifts():
    rng = np.random.default_rng(3)
    data = rng.normal(1.0, 2.0, size=200)
    estimate = stats.bootstrap_mean(data)
    t_low, t_high = scipy_stats.t.interval(0.95, len(data) - 1, loc=data.mean(), scale=scipy_stats.sem(data))
    assert estimate["value"] == pytest.approx(data.mean())
    assert estimate["low"] == pytest.approx(t_low, abs=0.08) and estimate["high"] == pytest.approx(t_high, abs=0.08)
    assert stats.sign_flip(data) < 0.01


def test_sign_flip_is_uniform_ish_under_the_null():
    rng = np.random.default_rng(5)
    p_values = [stats.sign_flip(rng.normal(size=30), resamples=400, seed=index) for index in range(60)]
    assert np.mean(np.asarray(p_values) < 0.05) <= 0.15  # 5 % expected; a broken test rejects far more often
