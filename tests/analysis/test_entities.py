"""entity_prompts, token_at_char, entity_grouping_test (seeds/002's "New York" vs "York New")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import wilcoxon

from repo_lens.analysis import (
    CARRIER_SENTENCES,
    ENTITY_PAIRS,
    FAKE_ENTITY_PAIRS,
    entity_grouping_test,
    entity_prompts,
    token_at_char,
)
from repo_lens.errors import InputError


def test_carriers_are_the_posts_five():
    assert [c.format(a="A", b="B") for c in CARRIER_SENTENCES] == [
        "A B", "the A B", "I visited A B", "near A B", "they went to A B",
    ]
    assert ("New", "York") in ENTITY_PAIRS and ("Marie", "Curie") in ENTITY_PAIRS
    assert ("Zorblax", "Quimby") in FAKE_ENTITY_PAIRS
    assert len(set(ENTITY_PAIRS)) == len(ENTITY_PAIRS)


def test_prompts_are_aligned_and_point_at_the_space():
    real, rev = entity_prompts()
    assert len(real) == len(rev) == len(ENTITY_PAIRS) * len(CARRIER_SENTENCES)
    for a, b in zip(real, rev):
        assert (a.first, a.second) == (b.second, b.first) and a.carrier == b.carrier
        assert not a.reversed and b.reversed
        for p in (a, b):
            assert p.text[p.boundary] == " "
            assert p.text[:p.boundary].endswith(p.first) and p.text[p.boundary + 1:] == p.second
    texts = {p.text for p in real}
    assert {"New York", "the New York", "I visited New York", "near New York", "they went to New York"} <= texts
    assert "they went to York New" in {p.text for p in rev}


def test_prompts_custom_and_bad():
    real, rev = entity_prompts([("Marie", "Curie")], ["near {a} {b}."])
    assert [p.text for p in real + rev] == ["near Marie Curie.", "near Curie Marie."]
    with pytest.raises(InputError, match="two non-empty words"):
        entity_prompts([("New York", "City")])
    with pytest.raises(InputError, match="exactly once"):
        entity_prompts(carriers=["{a}{b}"])
    with pytest.raises(InputError, match="at least one"):
        entity_prompts([])


def test_token_at_char():
    text = "I visited New York"
    bytes_spans = [(i, i + 1) for i in range(len(text))]
    assert token_at_char(bytes_spans, 13) == 13
    subword = [(0, 1), (1, 9), (9, 13), (13, 18)]  # I | ĠvisitedĠ... offsets include the space
    assert token_at_char(subword, 13) == 3
    trimmed = [(0, 1), (2, 9), (10, 13), (14, 18)]  # offsets trimmed of whitespace
    assert token_at_char(trimmed, 13) == 3
    with pytest.raises(InputError, match="no token covers or follows char 30"):
        token_at_char(subword, 30)


def test_grouping_hand_case():
    real = np.array([1.0, 1.2, 0.9, 1.1, 1.0, 0.8])
    rev = np.array([1.5, 1.6, 1.4, 1.2, 1.3, 1.1])
    r = entity_grouping_test(real, rev)
    assert r.n == 6
    assert r.mean_real == pytest.approx(1.0) and r.mean_reversed == pytest.approx(1.35)
    np.testing.assert_allclose(r.differences, real - rev)
    assert r.share_smaller == 1.0
    assert r.statistic == 0.0 and r.p_value == pytest.approx(2 / 2**6)  # exact two-sided


def test_grouping_per_layer_head_matches_scipy_per_column():
    rng = np.random.default_rng(0)
    real = rng.normal(1.0, 0.3, size=(100, 3, 2))
    rev = real + rng.normal(0.2, 0.2, size=(100, 3, 2))
    rev[:, 0] = real[:, 0]  # layer 0 sees byte identity only: identical, p = 1 as in the post
    r = entity_grouping_test(real, rev)
    assert r.p_value.shape == r.mean_real.shape == r.share_smaller.shape == (3, 2)
    assert r.differences.shape == (100, 3, 2)
    np.testing.assert_array_equal(r.p_value[0], [1.0, 1.0])
    np.testing.assert_array_equal(r.share_smaller[0], [0.0, 0.0])
    for layer in (1, 2):
        for head in (0, 1):
            expected = wilcoxon(real[:, layer, head], rev[:, layer, head])
            assert r.p_value[layer, head] == pytest.approx(expected.pvalue)
            assert r.statistic[layer, head] == pytest.approx(expected.statistic)
            assert r.share_smaller[layer, head] == np.mean(real[:, layer, head] < rev[:, layer, head])
    assert (r.p_value[1:] < 1e-3).all()


def test_float32_rounding_is_no_difference_but_a_small_real_one_is():
    """One byte's δ traced in prompts of other lengths differs by a few float32 ulp: that is p = 1, as a
    byte-identity layer's exact zeros are; a difference a thousand times larger is tested."""
    rng = np.random.default_rng(1)
    base = rng.uniform(1.0, 9.0, size=(79, 1)).astype(np.float32)
    ulps = rng.integers(-4, 5, size=(79, 1))
    toward = np.where(ulps > 0, np.inf, -np.inf).astype(np.float32)
    noisy = np.where(ulps == 0, base, np.nextafter(base, toward)).astype(np.float64)  # one float32 ulp either way
    assert np.abs(noisy - base).max() > 1e-8  # beyond the script's np.allclose(diff, 0)
    assert entity_grouping_test(noisy, base).p_value.tolist() == [1.0]
    shifted = base.astype(np.float64) + rng.normal(1e-3, 1e-4, size=(79, 1))
    assert entity_grouping_test(shifted, base).p_value[0] < 1e-6


def test_grouping_bad_input():
    with pytest.raises(InputError, match="real has shape \\(5,\\) but reversed_ has \\(4,\\)"):
        entity_grouping_test(np.zeros(5), np.zeros(4))
    with pytest.raises(InputError, match="at least 2 paired prompts"):
        entity_grouping_test(np.zeros(1), np.ones(1))
    with pytest.raises(InputError, match="NaN"):
        entity_grouping_test(np.array([1.0, np.nan]), np.ones(2))
    with pytest.raises(InputError, match="is empty"):
        entity_grouping_test(np.zeros(0), np.zeros(0))
