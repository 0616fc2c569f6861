"""relative_drift and category_order_test ("Learned position increments", Brendan Long: compare relative drift,
not absolute δ): hand-computed drift, bootstrap intervals against a reference loop, the statistics against
scipy and their textbook formulas, and the permutation tests' behaviour — a small ordered shift found, no
class effect left alone (p roughly uniform over seeds)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kruskal, kstest, rankdata

from repo_lens.analysis import POST_EXPECTED_ORDER, category_order_test, relative_drift
from repo_lens.errors import InputError

ORDER = ["punct", "word", "function", "subword"]


def test_drift_hand_case():
    values = np.array([1.2, 1.0, 0.9, 0.9, 1.0])
    drift = relative_drift(values, ["a", "a", "b", "b", "b"], n_boot=50)
    assert drift.center == pytest.approx(1.0) and drift.labels == ("a", "b")
    np.testing.assert_allclose(drift.median, [0.1, -0.1], atol=1e-12)
    np.testing.assert_allclose(drift.mean, [0.1, -1 / 15], atol=1e-12)
    np.testing.assert_array_equal(drift.count, [2, 3])
    scaled = relative_drift(values, ["a", "a", "b", "b", "b"], standardize=True, n_boot=10)
    np.testing.assert_allclose(scaled.median, np.array([0.1, -0.1]) / values.std(), atol=1e-12)


def test_bootstrap_intervals_match_a_reference_loop():
    rng = np.random.default_rng(5)
    values = rng.normal(1.0, 0.02, 300)
    labels = np.where(np.arange(300) < 120, "x", "y")
    got = relative_drift(values, labels, n_boot=400, seed=11)
    drift = values - values.mean()
    reference = np.random.default_rng(11)
    for k, name in enumerate(("x", "y")):
        member = drift[labels == name]
        boots = member[reference.integers(0, member.size, size=(400, member.size))]
        np.testing.assert_allclose(got.median_ci[k], np.quantile(np.median(boots, axis=1), [0.025, 0.975]))
        np.testing.assert_allclose(got.mean_ci[k], np.quantile(boots.mean(axis=1), [0.025, 0.975]))
        assert got.median_ci[k, 0] <= got.median[k] <= got.median_ci[k, 1]


def test_statistics_are_kruskal_h_and_the_trend_correlation():
    rng = np.random.default_rng(2)
    labels = rng.choice(ORDER, 500)
    values = rng.normal(0, 1, 500) + 0.3 * (labels == "punct")
    spread = category_order_test(values, labels, n_permutations=9)
    assert spread.value == pytest.approx(kruskal(*[values[labels == g] for g in ORDER]).statistic, rel=1e-9)
    trend = category_order_test(values, labels, ORDER, n_permutations=9)
    place = np.array([4 - ORDER.index(label) for label in labels], dtype=float)  # punct 4 ... subword 1
    assert trend.value == pytest.approx(np.corrcoef(place, rankdata(values))[0, 1], rel=1e-9)
    assert trend.labels == tuple(ORDER) and trend.n == 500 and trend.value > 0


def test_a_small_ordered_shift_is_found():
    """0.5% steps between four ordered categories (noise 1%), 4,000 tokens: p at its floor of 1/(B+1)."""
    rng = np.random.default_rng(0)
    labels = np.repeat(ORDER, 1000)
    values = 1.0 + 0.005 * np.repeat([3, 2, 1, 0], 1000) + rng.normal(0, 0.01, 4000)
    trend = category_order_test(values, labels, ORDER, n_permutations=199)
    assert trend.p_value == pytest.approx(1 / 200) and trend.value > 0.2
    reversed_run = category_order_test(-values, labels, ORDER, n_permutations=199)
    assert reversed_run.value < -0.2 and reversed_run.p_value < 0.01  # two-sided: the reversed order is found too
    assert category_order_test(-values, labels, ORDER, n_permutations=199, alternative="greater").p_value > 0.9
    assert category_order_test(values, labels, n_permutations=199).p_value < 0.01


def test_no_class_effect_gives_uniform_p_values():
    """Pure noise, 50 seeds: p > 0.05 in most, and the p-values look uniform (KS test, mean near 1/2)."""
    trend, spread = [], []
    for seed in range(50):
        rng = np.random.default_rng(100 + seed)
        labels = rng.choice(ORDER + ["other"], 300)
        values = rng.normal(1.0, 0.01, 300)
        trend.append(category_order_test(values, labels, ORDER, n_permutations=99, seed=seed).p_value)
        spread.append(category_order_test(values, labels, n_permutations=99, seed=seed).p_value)
    for p_values in (np.array(trend), np.array(spread)):
        assert np.mean(p_values > 0.05) >= 0.86  # 50 × 5% false positives: 2.5 expected, 7 is p < 0.01
        assert 0.35 < p_values.mean() < 0.65 and kstest(p_values, "uniform").pvalue > 0.01


def test_the_expected_order_is_the_graft_scripts():
    assert POST_EXPECTED_ORDER == ("sentence_punct", "word_start", "function_word", "subword_continuation")


def test_bad_input():
    with pytest.raises(InputError, match="values covers 3 tokens but categories covers 2"):
        relative_drift(np.ones(3), ["a", "b"])
    with pytest.raises(InputError, match="NaN"):
        relative_drift(np.array([1.0, np.nan]), ["a", "b"])
    with pytest.raises(InputError, match="empty"):
        relative_drift(np.zeros(0), np.zeros(0, dtype=str))
    with pytest.raises(InputError, match="categories must be a 1-D array of str"):
        category_order_test(np.ones(2), [1, 2])
    with pytest.raises(InputError, match="confidence must be a float between 0 and 1"):
        relative_drift(np.ones(2), ["a", "b"], confidence=95)
    with pytest.raises(InputError, match="cannot be standardised"):
        relative_drift(np.ones(2), ["a", "b"], standardize=True)
    with pytest.raises(InputError, match="at least 2 categories"):
        category_order_test(np.arange(4.0), ["a", "a", "b", "b"], ["a", "z"])
    with pytest.raises(InputError, match="order must be distinct category names"):
        category_order_test(np.arange(4.0), ["a", "a", "b", "b"], ["a", "a"])
    with pytest.raises(InputError, match="n_permutations must be an int >= 1"):
        category_order_test(np.arange(4.0), ["a", "a", "b", "b"], n_permutations=0)
    with pytest.raises(InputError, match="alternative must be"):
        category_order_test(np.arange(4.0), ["a", "a", "b", "b"], alternative="less")
    with pytest.raises(InputError, match="rank 2"):
        category_order_test(np.ones((2, 2)), ["a", "b"])
