"""range_stats, chunk_patterns, pattern_fractions, head_summary, select_heads: hand-computed
cases, a naive loop implementation straight from RePo §5.2, properties, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repo_lens.analysis import (
    PATTERN_LABELS,
    chunk_pattern_codes,
    chunk_patterns,
    head_summary,
    pattern_fractions,
    range_stats,
    select_heads,
)
from repo_lens.errors import InputError

FAST = settings(max_examples=60, deadline=None)


# ---------------------------------------------------------------- naive references (loops)

def naive_range(z):
    out = np.zeros(z.shape[:2])
    for l in range(z.shape[0]):
        for h in range(z.shape[1]):
            values = [float(v) for v in z[l, h]]
            out[l, h] = max(values) - min(values)
    return out


def naive_pattern(chunk, eps):
    chunk = [float(v) for v in chunk]
    total = 0.0
    for value in chunk:  # left-to-right float sum
        total += value
    mean = total / len(chunk)
    if all(abs(v - mean) <= eps for v in chunk):
        return "constant"
    pairs = list(zip(chunk, chunk[1:]))
    if all(b > a for a, b in pairs) or all(b < a for a, b in pairs):
        return "mono"
    return "hybrid"


def naive_patterns(z, size, eps):
    n = z.shape[2] // size
    return np.array(
        [[[naive_pattern(z[l, h, k * size:(k + 1) * size], eps) for k in range(n)]
          for h in range(z.shape[1])] for l in range(z.shape[0])]
    ).reshape(z.shape[0], z.shape[1], n)


def positions_strategy(max_t=40, elements=None):
    if elements is None:
        elements = st.floats(-100, 100, allow_nan=False, width=64)
    shape = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(2, max_t))
    return shape.flatmap(lambda s: hnp.arrays(np.float64, s, elements=elements))


# dyadic values (multiples of 1/8) and power-of-two chunk sizes: sums, means and shifts are exact
dyadic = st.integers(-800, 800).map(lambda k: k / 8)


# ---------------------------------------------------------------- range_stats

def test_range_hand_cases():
    rope = np.arange(10, dtype=np.float32)[None, None]
    nope = np.zeros((1, 1, 10), dtype=np.float32)
    repo = np.array([[[0.5, -1.5, 2.0, 1.0]]])
    assert range_stats(rope).tolist() == [[9.0]]
    assert range_stats(nope).tolist() == [[0.0]]
    assert range_stats(repo).tolist() == [[3.5]]
    assert range_stats(np.concatenate([rope, nope], axis=1)).shape == (1, 2)
    assert range_stats(rope).dtype == np.float64


@FAST
@given(positions_strategy())
def test_range_matches_naive(z):
    np.testing.assert_array_equal(range_stats(z), naive_range(z))


@FAST
@given(positions_strategy(elements=dyadic), dyadic)
def test_range_shift_invariant(z, shift):
    np.testing.assert_array_equal(range_stats(z + shift), range_stats(z))


# ---------------------------------------------------------------- chunk_patterns

def test_patterns_hand_cases():
    z = np.array([
        0.0, 0.1, 0.2, 0.3,      # increasing but within eps=0.2 of its mean: constant wins
        3.0, 2.0, 1.0, 0.0,      # strictly decreasing: mono
        0.0, 1.0, 1.0, 2.0,      # plateau breaks strictness: hybrid
        5.0, 5.0, 5.0, 5.0,      # constant
        0.0, 1.0, 2.0, 3.0,      # mono
        9.0, 9.5,                # trailing partial chunk: dropped
    ])[None, None]
    assert chunk_patterns(z, size=4, eps=0.2).tolist() == [[["constant", "mono", "hybrid", "constant", "mono"]]]
    assert chunk_pattern_codes(z, size=4, eps=0.2).tolist() == [[[0, 1, 2, 0, 1]]]


def test_patterns_eps_boundary_is_inclusive():
    on_edge = np.array([[[0.0, 0.5]]])  # mean 0.25, |z - mean| == 0.25 exactly
    assert chunk_patterns(on_edge, size=2, eps=0.25).tolist() == [[["constant"]]]
    beyond = np.array([[[0.0, 0.5 + 2.0**-20]]])
    assert chunk_patterns(beyond, size=2, eps=0.25).tolist() == [[["mono"]]]
    assert chunk_patterns(np.array([[[1.0, 1.0]]]), size=2, eps=0.0).tolist() == [[["constant"]]]


def test_patterns_rope_nope_and_shape():
    t = 16 * 5 + 7
    rope = np.broadcast_to(np.arange(t, dtype=np.float32), (2, 3, t))
    nope = np.zeros((2, 3, t), dtype=np.float32)
    assert chunk_patterns(rope).shape == (2, 3, 5)
    assert (chunk_patterns(rope) == "mono").all()
    assert (chunk_patterns(nope) == "constant").all()
    # rope steps of 0.01 stay within eps=0.2 of the chunk mean: constant
    assert (chunk_patterns(rope * 0.01) == "constant").all()


def test_patterns_across_blocks():
    """More chunks than one internal block (8192): the block loop must not lose or shift any."""
    rng = np.random.default_rng(1)
    z = rng.normal(size=(1, 3, 16 * 3000 + 5)).cumsum(axis=-1)
    np.testing.assert_array_equal(chunk_patterns(z), naive_patterns(z, 16, 0.2))


@FAST
@given(positions_strategy(), st.integers(2, 6), st.sampled_from([0.0, 0.2, 1.0, 5.0]))
def test_patterns_match_naive(z, size, eps):
    if z.shape[2] < size:
        size = z.shape[2]
    np.testing.assert_array_equal(chunk_patterns(z, size, eps), naive_patterns(z, size, eps))


@FAST
@given(positions_strategy(elements=dyadic), st.sampled_from([2, 4, 8]), dyadic, st.sampled_from([0.2, 0.25, 1.0]))
def test_patterns_shift_invariant(z, size, shift, eps):
    size = min(size, z.shape[2])
    np.testing.assert_array_equal(chunk_patterns(z + shift, size, eps), chunk_patterns(z, size, eps))


@FAST
@given(positions_strategy(elements=dyadic), st.sampled_from([2, 4, 8]))
def test_reversing_chunks_keeps_patterns(z, size):
    if z.shape[2] < size:
        return
    n = z.shape[2] // size
    z = z[..., : n * size]
    reversed_chunks = z.reshape(*z.shape[:2], n, size)[..., ::-1].reshape(z.shape)
    np.testing.assert_array_equal(chunk_patterns(reversed_chunks, size, 0.25), chunk_patterns(z, size, 0.25))


@FAST
@given(st.lists(st.floats(1.0, 10.0), min_size=3, max_size=20), st.floats(-50, 50))
def test_reversed_mono_chunk_stays_mono(steps, start):
    chunk = start + np.cumsum(steps)  # strictly increasing, range >= 2 > 2*eps: not constant
    z = chunk[None, None]
    size = len(steps)
    assert chunk_patterns(z, size).tolist() == [[["mono"]]]
    assert chunk_patterns(z[..., ::-1], size).tolist() == [[["mono"]]]


# ---------------------------------------------------------------- pattern_fractions

def test_fractions_hand_case():
    p = np.array([
        [["constant", "constant", "mono", "hybrid"], ["hybrid"] * 4],
        [["mono"] * 4, ["constant", "hybrid", "hybrid", "hybrid"]],
    ])
    fr = pattern_fractions(p)
    assert fr.labels == PATTERN_LABELS == ("constant", "mono", "hybrid")
    np.testing.assert_allclose(fr.per_head[0, 0], [0.5, 0.25, 0.25])
    np.testing.assert_allclose(fr.per_head[1, 1], [0.25, 0.0, 0.75])
    np.testing.assert_allclose(fr.per_layer, [[0.25, 0.125, 0.625], [0.125, 0.5, 0.375]])
    np.testing.assert_allclose(fr.overall, [3 / 16, 5 / 16, 8 / 16])
    assert fr.n_chunks == 4


@FAST
@given(positions_strategy(max_t=64), st.integers(2, 8))
def test_fractions_match_naive_counts(z, size):
    if z.shape[2] < size:
        size = z.shape[2]
    p = chunk_patterns(z, size)
    fr = pattern_fractions(p)
    flat = p.ravel().tolist()
    assert fr.overall.tolist() == pytest.approx([flat.count(label) / len(flat) for label in PATTERN_LABELS])
    for l in range(p.shape[0]):
        row = p[l].ravel().tolist()
        assert fr.per_layer[l].tolist() == pytest.approx([row.count(label) / len(row) for label in PATTERN_LABELS])
    np.testing.assert_allclose(fr.per_head.sum(axis=-1), 1.0)


# ---------------------------------------------------------------- head_summary

def test_head_summary_hand_case():
    z = np.array([[[-1.0, 0.0, 2.0, 1.0, 3.0], [4.0, 3.0, 2.0, 1.0, 0.0]]])
    s = head_summary(z)
    assert s.mean.tolist() == [[1.0, 2.0]]
    np.testing.assert_allclose(s.std, [[np.std([-1, 0, 2, 1, 3]), np.sqrt(2.0)]])
    assert s.negative_share.tolist() == [[0.2, 0.0]]
    assert s.increasing_share.tolist() == [[0.75, 0.0]]
    assert s.decreasing_share.tolist() == [[0.25, 1.0]]
    assert s.range.tolist() == [[4.0, 4.0]]


@FAST
@given(positions_strategy())
def test_head_summary_matches_naive(z):
    s = head_summary(z)
    for l in range(z.shape[0]):
        for h in range(z.shape[1]):
            values = [float(v) for v in z[l, h]]
            n = len(values)
            mean = sum(values) / n
            assert s.mean[l, h] == pytest.approx(mean, abs=1e-9)
            assert s.std[l, h] == pytest.approx((sum((v - mean) ** 2 for v in values) / n) ** 0.5, abs=1e-6)
            assert s.negative_share[l, h] == sum(v < 0 for v in values) / n
            steps = list(zip(values, values[1:]))
            assert s.increasing_share[l, h] == sum(b > a for a, b in steps) / (n - 1)
            assert s.decreasing_share[l, h] == sum(b < a for a, b in steps) / (n - 1)


# ---------------------------------------------------------------- select_heads

def test_select_heads():
    z = np.arange(2 * 3 * 4, dtype=float).reshape(2, 3, 4)
    np.testing.assert_array_equal(select_heads(z, layers=-1, heads=[0, 2]), z[[1]][:, [0, 2]])
    assert select_heads(z).shape == (2, 3, 4)
    assert select_heads(range_stats(z), layers=[0], heads=1).shape == (1, 1)
    with pytest.raises(InputError, match=r"layer 2 does not exist; this array has layers 0..1"):
        select_heads(z, layers=2)
    with pytest.raises(InputError, match="head -4 does not exist"):
        select_heads(z, heads=[-4])
    with pytest.raises(InputError, match="head 1.5 is not an integer index"):
        select_heads(z, heads=[1.5])
    with pytest.raises(InputError, match="empty layer selection"):
        select_heads(z, layers=[])


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("function", [range_stats, chunk_patterns, head_summary])
def test_rank_must_be_three(function):
    with pytest.raises(InputError, match=r"expected rank 3.*z\[None, None\]"):
        function(np.arange(40.0))
    with pytest.raises(InputError, match=r"rank 2"):
        function(np.zeros((2, 40)))


@pytest.mark.parametrize("function", [range_stats, chunk_patterns, head_summary])
@pytest.mark.parametrize("bad, phrase", [(np.nan, "contains NaN at index \\(0, 1, 3\\)"), (np.inf, "contains inf")])
def test_non_finite_positions(function, bad, phrase):
    z = np.zeros((2, 2, 32), dtype=np.float32)
    z[0, 1, 3] = bad
    with pytest.raises(InputError, match=phrase):
        function(z)


@pytest.mark.parametrize("function", [range_stats, chunk_patterns, head_summary])
def test_empty_and_non_numeric(function):
    with pytest.raises(InputError, match="is empty"):
        function(np.zeros((1, 1, 0)))
    with pytest.raises(InputError, match="numeric"):
        function(np.array([[["a", "b"]]]))
    with pytest.raises(InputError, match="not a rectangular"):
        function([[[0.0, 1.0], [2.0]]])


def test_chunk_arguments():
    z = np.zeros((1, 1, 32))
    with pytest.raises(InputError, match="chunk size 1 < 2"):
        chunk_patterns(z, size=1)
    with pytest.raises(InputError, match="size must be an int"):
        chunk_patterns(z, size=2.5)
    with pytest.raises(InputError, match="eps must be a finite number >= 0"):
        chunk_patterns(z, eps=-0.1)
    with pytest.raises(InputError, match="eps must be a finite number >= 0"):
        chunk_patterns(z, eps=float("nan"))
    with pytest.raises(InputError, match="shorter than one chunk"):
        chunk_patterns(np.zeros((1, 1, 10)), size=16)
    assert issubclass(InputError, ValueError)


def test_fractions_and_summary_bad_input():
    with pytest.raises(InputError, match="expected \\(n_layers, n_heads, n_chunks\\)"):
        pattern_fractions(np.array(["mono", "hybrid"]))
    with pytest.raises(InputError, match="unknown pattern label 'flat'"):
        pattern_fractions(np.array([[["mono", "flat"]]]))
    with pytest.raises(InputError, match="str array"):
        pattern_fractions(np.zeros((1, 1, 2)))
    with pytest.raises(InputError, match="is empty"):
        pattern_fractions(np.zeros((1, 1, 0), dtype="<U8"))
    with pytest.raises(InputError, match="T >= 2"):
        head_summary(np.zeros((1, 1, 1)))
