"""The learned-increments post's entity test as its script runs it ("Learned position increments", Brendan Long;
entity_grouping_analysis.py): its 79 entities x 5 carriers, δ at the space averaged over the carriers, a
two-sided Wilcoxon signed-rank test per layer with p = 1 where every difference is within 1e-8 of zero."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import wilcoxon

from repo_lens.analysis import CARRIER_SENTENCES, ENTITY_PAIRS, entity_grouping_test, entity_prompts
from repo_lens.errors import InputError


def test_the_entities_are_the_scripts_79():
    assert len(ENTITY_PAIRS) == len(set(ENTITY_PAIRS)) == 79
    assert ENTITY_PAIRS[:3] == (("United", "States"), ("United", "Kingdom"), ("South", "Korea"))
    assert ENTITY_PAIRS[-3:] == (("Old", "Testament"), ("Holy", "Land"), ("Far", "East"))
    assert {("Marie", "Curie"), ("New", "York"), ("World", "War"), ("Milky", "Way")} <= set(ENTITY_PAIRS)
    assert all(a.isascii() and b.isascii() and a[0].isupper() and b[0].isupper() for a, b in ENTITY_PAIRS)


def test_space_byte_is_the_scripts_offset():
    """The script: len(prefix.encode()) + len(w1.encode()), the byte of the space inside the entity."""
    real, rev = entity_prompts([("Zürich", "Bahnhof"), ("New", "York")])
    for prompt in real + rev:
        carrier = CARRIER_SENTENCES[prompt.carrier]
        prefix = carrier.split("{a}")[0]
        expected = len(prefix.encode()) + len(prompt.first.encode())
        assert prompt.space_byte == expected and prompt.text.encode()[expected] == ord(" ")
    assert real[0].space_byte == 7 and real[0].boundary == 6  # "Zürich Bahnhof": ü takes two bytes


def reference(real: np.ndarray, reversed_: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The script's analyze(): per entity the carrier mean; per layer mean, share c < v, p (allclose guard)."""
    c, v = real.mean(axis=1), reversed_.mean(axis=1)
    p = []
    for layer in range(c.shape[1]):
        diff = v[:, layer] - c[:, layer]
        p.append(1.0 if np.allclose(diff, 0) else float(wilcoxon(diff).pvalue))
    return c.mean(axis=0), v.mean(axis=0), (c < v).mean(axis=0), np.array(p)


def test_carrier_mean_test_matches_the_script():
    rng = np.random.default_rng(0)
    n_entities, n_carriers, n_layers = len(ENTITY_PAIRS), len(CARRIER_SENTENCES), 4
    real = rng.normal(1.0, 0.3, size=(n_entities, n_carriers, n_layers))
    reversed_ = real + rng.normal(0.0, 0.3, size=real.shape) + np.array([0.0, 0.02, 0.1, 0.3])
    reversed_[:, :, 0] = real[:, :, 0] + rng.normal(0, 1e-10, size=(n_entities, n_carriers))  # byte identity: float noise
    got = entity_grouping_test(real, reversed_, carrier_axis=1)
    mean_real, mean_reversed, share, p = reference(real, reversed_)
    np.testing.assert_allclose(got.mean_real, mean_real)
    np.testing.assert_allclose(got.mean_reversed, mean_reversed)
    np.testing.assert_array_equal(got.share_smaller, share)
    np.testing.assert_allclose(got.p_value, p, rtol=1e-10)
    assert got.n == 79 and got.p_value[0] == 1.0 and got.p_value[3] < 1e-6


def test_prompts_reshape_to_entities_by_carriers():
    real, _ = entity_prompts()
    grid = np.array([p.text for p in real], dtype=object).reshape(len(ENTITY_PAIRS), len(CARRIER_SENTENCES))
    assert grid[20, 2] == "I visited New York" and grid[0, 4] == "they went to United States"


def test_hand_case_of_three_entities():
    # two carriers each; carrier means real [1, 2, 3], reversed [2, 4, 6]: all three real spaces smaller
    real = np.array([[0.5, 1.5], [2.0, 2.0], [3.0, 3.0]])
    reversed_ = np.array([[2.0, 2.0], [4.0, 4.0], [5.0, 7.0]])
    got = entity_grouping_test(real, reversed_, carrier_axis=1)
    assert (float(got.mean_real), float(got.mean_reversed), float(got.share_smaller)) == (2.0, 4.0, 1.0)
    assert float(got.p_value) == pytest.approx(0.25)  # exact: 2 of the 2^3 sign patterns are as extreme


def test_carrier_axis_bad_input():
    with pytest.raises(InputError, match="carrier_axis must be an axis after the first"):
        entity_grouping_test(np.ones((3, 2)), np.ones((3, 2)), carrier_axis=0)
    with pytest.raises(InputError, match="carrier_axis must be an axis after the first"):
        entity_grouping_test(np.ones((3, 2)), np.ones((3, 2)), carrier_axis=2)
    with pytest.raises(InputError, match="at least 2 paired prompts"):
        entity_grouping_test(np.ones((1, 5, 2)), np.ones((1, 5, 2)), carrier_axis=1)
    with pytest.raises(InputError, match="real has shape"):
        entity_grouping_test(np.ones((3, 5, 2)), np.ones((3, 4, 2)), carrier_axis=1)
    with pytest.raises(InputError, match="NaN"):
        entity_grouping_test(np.full((3, 5), np.nan), np.ones((3, 5)), carrier_axis=1)
