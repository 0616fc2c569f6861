"""unit_relative_drift and unit_category_test ("Learned position increments", Brendan Long: compare relative drift,
not absolute δ): per unit they are relative_drift and category_order_test; across units the medians and the
Benjamini-Hochberg count match hand-written references; a small class effect inside units of very different
speeds is found with the right sign where the absolute values miss it; unit speeds without a class effect are
not taken for one where absolute class means are fooled; and bad input is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import f_oneway, kruskal, rankdata

from repo_lens.analysis import (SUBWORD_EXPECTED_ORDER, category_order_test, relative_drift, unit_category_test,
                                unit_relative_drift)
from repo_lens.errors import InputError

CLASSES = ["a", "b", "c"]  # the expected order in these tests: a > b > c


def planted(speeds: np.ndarray, shift: np.ndarray, n: int, seed: int, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Units running at ``speeds``; class k's increments are ``shift[k]`` (relative) above the unit's speed."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(CLASSES, n)
    relative = np.asarray(shift)[np.searchsorted(CLASSES, labels)]
    values = speeds[:, None] * (1.0 + relative + rng.normal(0.0, noise, (speeds.size, n)))
    return values, labels


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Adjusted p-values, from the definition: min over j ≥ i of p_(j) · m / j, capped at 1."""
    order = np.argsort(p)
    scaled = p[order] * p.size / np.arange(1, p.size + 1)
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty_like(p)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def test_each_unit_is_relative_drift_and_category_order_test():
    values, labels = planted(np.array([0.5, 1.0, 1.7, 3.0]), np.array([0.003, 0.0, -0.002]), 240, seed=1)
    drift = unit_relative_drift(values, labels, n_boot=300, seed=4)
    spread = unit_category_test(values, labels, n_permutations=99, seed=7)
    trend = unit_category_test(values, labels, CLASSES, n_permutations=99, seed=7)
    for unit, row in enumerate(values):
        own = relative_drift(row, labels, n_boot=300, seed=4)
        columns = [drift.labels.index(label) for label in own.labels]
        np.testing.assert_allclose(drift.mean[unit, columns], own.mean)
        np.testing.assert_allclose(drift.median_ci[unit, columns], own.median_ci)
        np.testing.assert_allclose(drift.standardized[unit, columns],
                                   relative_drift(row, labels, standardize=True, n_boot=2).mean)
        assert drift.center[unit] == pytest.approx(row.mean()) and drift.scale[unit] == pytest.approx(row.std())
        assert spread.value[unit] == pytest.approx(kruskal(*[row[labels == c] for c in CLASSES]).statistic, rel=1e-9)
        assert spread.effect[unit] == pytest.approx(spread.value[unit] / (row.size - 1))
        place = np.array([3 - CLASSES.index(label) for label in labels], dtype=float)
        assert trend.value[unit] == pytest.approx(np.corrcoef(place, rankdata(row))[0, 1], rel=1e-9)
        # shared labels: every unit gets the shuffles category_order_test draws with the same seed
        assert spread.p_value[unit] == category_order_test(row, labels, n_permutations=99, seed=7).p_value
        assert trend.p_value[unit] == category_order_test(row, labels, CLASSES, n_permutations=99, seed=7).p_value
    np.testing.assert_allclose(spread.p_adjusted, benjamini_hochberg(spread.p_value))
    assert spread.pooled_value == pytest.approx(spread.value.sum()) and trend.pooled_value == pytest.approx(trend.value.mean())
    np.testing.assert_allclose(drift.across_median, np.median(drift.mean, axis=0))
    reference = drift.mean[np.random.default_rng(4).integers(0, 4, size=(300, 4))]  # units resampled
    np.testing.assert_allclose(drift.across_ci, np.quantile(np.median(reference, axis=1), [0.025, 0.975], axis=0).T)
    np.testing.assert_allclose(drift.share_positive, np.mean(drift.mean > 0, axis=0))


def test_benjamini_hochberg_count_on_a_hand_case():
    """Units with a strong, a weak and no class effect: BH at 0.05 keeps exactly the units a hand count gives."""
    rng = np.random.default_rng(3)
    labels = np.repeat(["a", "b"], 150)
    effect = np.array([0.02, 0.02, 0.0, 0.0, 0.0, 0.0])[:, None] * (labels == "a")
    test = unit_category_test(1.0 + effect + rng.normal(0, 0.01, (6, 300)), labels, n_permutations=199)
    ranked = np.sort(test.p_value)
    hand = max((k + 1 for k in range(6) if ranked[k] <= 0.05 * (k + 1) / 6), default=0)  # the step-up rule
    assert int(test.significant.sum()) == hand == 2 and set(np.flatnonzero(test.significant)) == {0, 1}


def test_a_small_class_effect_in_units_of_very_different_speeds_is_found():
    """Speeds 0.3 to 3 (10×), classes 0.4% apart inside each unit, 1% noise: found per unit and pooled, with the
    right sign and size (0.4% in units of a unit's spread ≈ 0.38), where an ANOVA of the absolute values misses it."""
    speeds = np.geomspace(0.3, 3.0, 10)
    values, labels = planted(speeds, np.array([0.004, 0.0, -0.004]), 900, seed=0)
    spread = unit_category_test(values, labels, n_permutations=199)
    trend = unit_category_test(values, labels, CLASSES, n_permutations=199)
    assert spread.pooled_p_value == pytest.approx(1 / 200) and trend.pooled_p_value == pytest.approx(1 / 200)
    assert trend.pooled_value > 0.1 and np.all(trend.value > 0) and int(trend.significant.sum()) == 10
    drift = unit_relative_drift(values, labels, n_boot=500)
    a, c = drift.labels.index("a"), drift.labels.index("c")
    assert drift.across_ci[a, 0] > 0 and drift.across_ci[c, 1] < 0 and drift.share_positive[a] == 1.0
    within_sd = np.hypot(0.01, 0.004 * np.sqrt(2 / 3))  # noise and the planted shifts, relative to the speed
    assert drift.across_standardized[a] == pytest.approx(0.004 / within_sd, rel=0.2)
    assert drift.across_standardized[c] == pytest.approx(-0.004 / within_sd, rel=0.2)
    # the absolute values, pooled over units: the speeds swamp the class effect (one-way ANOVA of the classes)
    assert f_oneway(*[values[:, labels == c].ravel() for c in CLASSES]).pvalue > 0.05


def test_opposite_drifts_cancel_in_absolute_class_means_but_not_in_the_units():
    """Half the units give class a +1%, half −1%: the class means over units agree to 0.1%, yet every unit has
    a class effect; the spread test finds it, the test of one order (signed) rightly does not."""
    speeds = np.array([0.6, 0.9, 1.2, 1.5, 0.6, 0.9, 1.2, 1.5])
    rng = np.random.default_rng(5)
    labels = rng.choice(CLASSES, 600)
    sign = np.repeat([1.0, -1.0], 4)[:, None]
    values = speeds[:, None] * (1.0 + sign * 0.01 * (labels == "a") + rng.normal(0, 0.01, (8, 600)))
    means = {c: values[:, labels == c].mean(axis=1).mean() for c in CLASSES}
    assert max(means.values()) / min(means.values()) - 1 < 0.001
    spread = unit_category_test(values, labels, n_permutations=199)
    assert spread.pooled_p_value == pytest.approx(1 / 200) and int(spread.significant.sum()) == 8
    assert unit_category_test(values, labels, CLASSES, n_permutations=199).pooled_p_value > 0.05
    drift = unit_relative_drift(values, labels, n_boot=200)
    assert np.all(np.abs(drift.standardized[:, drift.labels.index("a")]) > 0.5)  # each unit: a ±0.7-SD shift


def test_speeds_without_a_class_effect_are_not_a_class_effect():
    """No class effect, but class a is common in the fast units and rare in the slow ones: the absolute class
    means differ by 40% and a test on them is 'significant'; the stratified tests are not."""
    rng = np.random.default_rng(2)
    speeds = np.geomspace(0.5, 2.0, 8)
    share_a = np.linspace(0.1, 0.9, 8)
    labels = np.where(rng.random((8, 400)) < share_a[:, None], "a", np.where(rng.random((8, 400)) < 0.5, "b", "c"))
    values = speeds[:, None] * (1.0 + rng.normal(0, 0.01, (8, 400)))
    absolute = {c: values[labels == c].mean() for c in CLASSES}
    assert absolute["a"] / absolute["c"] > 1.4
    assert category_order_test(values.ravel(), labels.ravel(), CLASSES, n_permutations=199).p_value < 0.01
    for order in (None, CLASSES):
        test = unit_category_test(values, labels, order, n_permutations=199, seed=0)
        assert not test.shared_shuffle and test.pooled_p_value > 0.05 and int(test.significant.sum()) == 0
    drift = unit_relative_drift(values, labels, n_boot=300)
    assert np.all((drift.across_ci[:, 0] < 0) & (drift.across_ci[:, 1] > 0))  # no class drifts either way


@pytest.mark.parametrize("shared", [True, False])
def test_pooled_p_values_are_calibrated_without_a_class_effect(shared):
    """40 null data sets (units of different speeds, no class effect): p > 0.05 in at least 34 (2 expected)."""
    p_values = []
    for seed in range(40):
        rng = np.random.default_rng(50 + seed)
        labels = rng.choice(CLASSES, 200 if shared else (5, 200))
        values = np.geomspace(0.5, 2, 5)[:, None] * rng.gamma(20, 0.05, (5, 200))
        p_values.append(unit_category_test(values, labels, n_permutations=99, seed=seed).pooled_p_value)
    assert np.mean(np.array(p_values) > 0.05) >= 0.85 and 0.3 < np.mean(p_values) < 0.7


def test_units_on_the_same_tokens_share_their_shuffles():
    """Eight copies of one unit are one unit's evidence: with shared labels the pooled p is the unit's p; given
    as eight independent units (labels per unit) the same data would count eight times."""
    rng = np.random.default_rng(10)
    labels = rng.choice(CLASSES, 300)
    row = 1.0 + 0.002 * (labels == "a") + rng.normal(0, 0.01, 300)  # a weak effect: p ≈ 0.1 in one unit
    copies = np.tile(row, (8, 1))
    shared = unit_category_test(copies, labels, n_permutations=499)
    assert shared.pooled_p_value == shared.p_value[0] and np.all(shared.p_value == shared.p_value[0])
    assert shared.p_value[0] > 0.05
    independent = unit_category_test(copies, np.tile(labels, (8, 1)), n_permutations=499)
    assert independent.pooled_p_value < 0.01


def test_the_subword_order_is_a_subset_of_our_partition_highest_first():
    from repo_lens.analysis import SUBWORD_CATEGORIES

    assert SUBWORD_EXPECTED_ORDER == ("whitespace", "punctuation", "word_initial", "continuation")
    assert set(SUBWORD_EXPECTED_ORDER) <= set(SUBWORD_CATEGORIES)


def test_bad_input_is_refused_by_name():
    values, labels = np.ones((3, 4)) + np.arange(4), np.array(["a", "a", "b", "b"])
    with pytest.raises(InputError, match="values covers 4 tokens but categories covers 3"):
        unit_relative_drift(values, labels[:3])
    with pytest.raises(InputError, match=r"categories has shape \(2, 4\) but values has shape \(3, 4\)"):
        unit_category_test(values, np.tile(labels, (2, 1)))
    one_class = np.tile(labels, (3, 1))
    one_class[1] = "a"
    for function in (unit_relative_drift, unit_category_test):
        with pytest.raises(InputError, match="categories: unit 1 has tokens of one category only"):
            function(values, one_class)
    with pytest.raises(InputError, match="categories: every unit has tokens of one category only"):
        unit_category_test(values, np.array(["a"] * 4))
    nan = values.copy()
    nan[2, 1] = np.nan
    for function in (unit_relative_drift, unit_category_test):
        with pytest.raises(InputError, match=r"values contains NaN at index \(2, 1\)"):
            function(nan, labels)
    with pytest.raises(InputError, match="values has rank 1"):
        unit_category_test(np.arange(4.0), labels)
    with pytest.raises(InputError, match="categories must be str labels"):
        unit_category_test(values, [1, 2, 3, 4])
    with pytest.raises(InputError, match="values: unit 0 is constant"):
        unit_relative_drift(np.vstack([np.ones(4), np.arange(4.0)]), labels)
    with pytest.raises(InputError, match="categories of unit 0: the test needs tokens of at least 2 categories"):
        unit_category_test(values, labels, ["a", "z"])
    with pytest.raises(InputError, match="order must be distinct category names"):
        unit_category_test(values, labels, ["a", "a"])
    with pytest.raises(InputError, match="alpha must be a float between 0 and 1"):
        unit_category_test(values, labels, alpha=5)
    with pytest.raises(InputError, match="n_boot must be an int >= 1"):
        unit_relative_drift(values, labels, n_boot=0)
