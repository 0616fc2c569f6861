"""attention_lookback and lookback_correlation: hand cases, naive loops, scipy references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.stats import pearsonr, spearmanr

from repo_lens.analysis import attention_lookback, lookback_correlation
from repo_lens.errors import InputError

FAST = settings(max_examples=40, deadline=None)


def causal_softmax(scores):
    t = scores.shape[-1]
    masked = np.where(np.tril(np.ones((t, t), dtype=bool)), scores, -np.inf)
    e = np.exp(masked - masked.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_lookback_hand_cases():
    p = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])
    np.testing.assert_allclose(attention_lookback(p), [0.0, 0.5, 0.25])
    np.testing.assert_allclose(attention_lookback(p[1:], query_index=[1, 2]), [0.5, 0.25])
    # attend-to-first-token heads look back i tokens; diagonal heads 0
    t = 5
    first = np.zeros((t, t))
    first[:, 0] = 1.0
    np.testing.assert_allclose(attention_lookback(np.stack([first, np.eye(t)])), [np.arange(t), np.zeros(t)])
    # rows are renormalised (bf16 probabilities rarely sum to exactly 1)
    np.testing.assert_allclose(attention_lookback(np.array([[1.0, 0.0], [0.51, 0.51]])), [0.0, 0.5])


def test_lookback_matches_naive():
    rng = np.random.default_rng(0)
    p = causal_softmax(rng.normal(size=(2, 3, 7, 7)))
    got = attention_lookback(p)
    assert got.shape == (2, 3, 7)
    for index in np.ndindex(2, 3):
        for i in range(7):
            expected = sum(p[index][i, j] * (i - j) for j in range(7))
            assert got[index][i] == pytest.approx(expected)


def test_lookback_bad_input():
    with pytest.raises(InputError, match="3 query rows and 4 keys.*query_index"):
        attention_lookback(np.full((3, 4), 0.25))
    with pytest.raises(InputError, match="query_index must be 3 ints"):
        attention_lookback(np.full((3, 4), 0.25), query_index=[1, 2])
    with pytest.raises(InputError, match="0..3"):
        attention_lookback(np.full((1, 4), 0.25), query_index=[4])
    with pytest.raises(InputError, match="negative entries"):
        attention_lookback(np.array([[1.5, -0.5], [0.5, 0.5]]))
    with pytest.raises(InputError, match="sums to 0"):
        attention_lookback(np.array([[0.0, 0.0], [0.5, 0.5]]))
    with pytest.raises(InputError, match="rank >= 2"):
        attention_lookback(np.ones(3))
    with pytest.raises(InputError, match="NaN"):
        attention_lookback(np.array([[np.nan]]))


def test_correlation_hand_case():
    inc = np.array([[[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0]]])
    look = np.array([[[0.0, 1.0, 4.0, 9.0], [0.0, 1.0, 2.0, 3.0]]])
    c = lookback_correlation(inc, look)
    assert c.pearson.shape == c.spearman.shape == (1, 2)
    assert c.pearson[0, 0] == pytest.approx(pearsonr([1, 2, 3, 4], [0, 1, 4, 9]).statistic)
    assert c.spearman[0, 0] == 1.0
    assert np.isnan(c.pearson[0, 1]) and np.isnan(c.spearman[0, 1])  # RoPE: constant increments
    assert c.n.tolist() == [[4, 4]]


@FAST
@given(
    st.integers(3, 30).flatmap(
        lambda t: st.tuples(
            hnp.arrays(np.float64, (2, 2, t), elements=st.one_of(st.integers(-5, 5).map(float), st.just(np.nan))),
            hnp.arrays(np.float64, (2, 2, t), elements=st.floats(-10, 10)),
        )
    )
)
def test_correlation_matches_scipy(case):
    inc, look = case
    c = lookback_correlation(inc, look)
    for index in np.ndindex(2, 2):
        keep = ~np.isnan(inc[index])
        x, y = inc[index][keep], look[index][keep]
        assert c.n[index] == keep.sum()
        if keep.sum() < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
            assert np.isnan(c.pearson[index]) and np.isnan(c.spearman[index])
            continue
        assert c.pearson[index] == pytest.approx(pearsonr(x, y).statistic, abs=1e-9)
        assert c.spearman[index] == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)


def test_correlation_heads_with_different_masks_match_scipy_one_by_one():
    """Heads are grouped by their mask of usable tokens: each head must still get its own answer."""
    rng = np.random.default_rng(5)
    inc = rng.integers(-3, 4, size=(3, 4, 50)).astype(np.float64)  # ties, for Spearman's average ranks
    look = rng.normal(size=(3, 4, 50)) + 0.3 * inc
    inc[..., 0] = np.nan  # the usual origin=nan first increment
    inc[1, 2, 10:20] = np.nan
    inc[2, 0, 5] = np.nan
    inc[0, 3] = 2.0  # a constant (RoPE-like) head
    inc[2, 1, 3:] = np.nan  # two usable tokens
    c = lookback_correlation(inc, look)
    for index in np.ndindex(3, 4):
        keep = ~np.isnan(inc[index])
        x, y = inc[index][keep], look[index][keep]
        if index in ((0, 3), (2, 1)):
            assert np.isnan(c.pearson[index]) and np.isnan(c.spearman[index])
            continue
        assert c.pearson[index] == pytest.approx(pearsonr(x, y).statistic, abs=1e-12)
        assert c.spearman[index] == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert c.n[1, 2] == 39 and c.n[2, 0] == 48 and c.n[2, 1] == 2


def test_correlation_bad_input():
    with pytest.raises(InputError, match="increments has shape \\(1, 1, 3\\) but lookback has \\(1, 1, 4\\)"):
        lookback_correlation(np.zeros((1, 1, 3)), np.zeros((1, 1, 4)))
    with pytest.raises(InputError, match="contains inf"):
        lookback_correlation(np.array([1.0, np.inf, 2.0]), np.zeros(3))
