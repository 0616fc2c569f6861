"""position_increments, byte/subword categories and increments_by_category (seeds/002):
hand-computed cases, naive loop references, properties, bad input."""

from __future__ import annotations

import string
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repo_lens.analysis import (
    BYTE_CATEGORIES,
    byte_categories,
    increments_by_category,
    is_cjk_char,
    position_increments,
    subword_categories,
    trace_increments,
)
from repo_lens.errors import InputError

FAST = settings(max_examples=50, deadline=None)


# ---------------------------------------------------------------- position_increments

def test_increments_invert_cumsum():
    delta = np.array([[[2.9, 0.8, 0.7, 1.05, 1.1]], [[1.0, 1.0, 1.0, 1.0, 1.0]]])
    np.testing.assert_allclose(position_increments(np.cumsum(delta, axis=-1)), delta)
    rope = np.broadcast_to(np.arange(6, dtype=np.float32), (2, 3, 6))
    assert position_increments(rope).tolist() == [[[0.0] + [1.0] * 5] * 3] * 2
    assert position_increments(np.full((1, 1, 4), 7.0)).tolist() == [[[7.0, 0.0, 0.0, 0.0]]]


def test_increments_origin():
    inc = position_increments(np.array([3.0, 4.0, 6.0]), origin=np.nan)
    assert np.isnan(inc[0]) and inc[1:].tolist() == [1.0, 2.0]
    assert position_increments(np.array([3.0, 4.0]), origin=3.0).tolist() == [0.0, 1.0]
    with pytest.raises(InputError, match="origin must be finite or NaN"):
        position_increments(np.array([3.0]), origin=np.inf)


@FAST
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 20)), elements=st.floats(-1e3, 1e3)))
def test_increments_match_naive(z):
    inc = position_increments(z)
    for row, out in zip(z, inc):
        previous = 0.0
        for value, got in zip(row, out):
            assert got == value - previous
            previous = value


def test_increments_bad_input():
    with pytest.raises(InputError, match="is empty"):
        position_increments(np.zeros((2, 0)))
    with pytest.raises(InputError, match="NaN"):
        position_increments(np.array([0.0, np.nan]))
    with pytest.raises(InputError, match="rank 0"):
        position_increments(np.float64(3.0))


# ---------------------------------------------------------------- trace_increments

def _trace(positions, kinds, increments=None):
    from repo_lens import Trace

    positions = np.asarray(positions, dtype=np.float32)
    extras = {} if increments is None else {"increments": np.asarray(increments, dtype=np.float32)}
    n = positions.shape[-1]
    return Trace(tokens=["x"] * n, token_ids=np.arange(n), positions=positions, layer_kinds=kinds, extras=extras)


def test_trace_increments_use_what_each_mechanism_sums():
    omega = np.array([0.5, 2.0, 1.0, 3.0])
    exclusive = np.cumsum(omega) - omega  # GRAPE-M: z_t = sum of omega_s for s < t
    delta = np.array([1.0, 0.25, 4.0, 0.5])
    positions = np.stack([np.arange(4.0), exclusive, np.cumsum(delta), [3.0, 1.0, 2.0, 2.5]])[:, None]
    stored = np.stack([np.diff(positions[0], prepend=0.0), omega[None], delta[None], np.zeros((1, 4))])
    trace = _trace(positions, ["rope", "grape-m", "lpi", "repo"], stored)
    increments = trace_increments(trace)
    assert increments.shape == (4, 1, 4) and increments.dtype == np.float64
    np.testing.assert_array_equal(increments[0, 0], [np.nan, 1.0, 1.0, 1.0])  # RoPE: differences, none at t = 0
    np.testing.assert_array_equal(increments[1, 0], omega)  # exclusive sum: the stored ω, not z_t − z_{t−1}
    assert not np.allclose(increments[1, 0, 1:], np.diff(exclusive))
    np.testing.assert_array_equal(increments[2, 0], delta)  # inclusive sum: δ, which is z_t − z_{t−1}
    np.testing.assert_array_equal(increments[3, 0], [np.nan, -2.0, 1.0, 0.5])  # RePo: differences


def test_trace_increments_without_stored_increments_are_position_differences():
    positions = np.array([[[0.0, 2.0, 3.0]], [[1.0, 1.0, 0.0]]])
    np.testing.assert_array_equal(trace_increments(_trace(positions, ["lpi", "nope"])),
                                  position_increments(positions, origin=np.nan))


# ---------------------------------------------------------------- byte_categories

def naive_byte_categories(text: str) -> list[str]:
    """Per character from Python's own Unicode knowledge; bytes after the first are continuation."""
    out = []
    for char in text:
        data = char.encode("utf-8")
        if len(data) > 1:
            name = unicodedata.name(char, "")
            cjk = len(data) == 3 and name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH"))
            out.append("cjk_lead" if cjk else "other_lead")
            out.extend(["continuation"] * (len(data) - 1))
        elif char.islower():
            out.append("lowercase")
        elif char.isupper():
            out.append("uppercase")
        elif char.isdigit():
            out.append("digit")
        elif char in " \t":
            out.append("space")
        elif char in "\n\r":
            out.append("newline")
        elif char in string.punctuation:
            out.append("punctuation")
        else:
            out.append("other")
    return out


def test_byte_categories_hand_case():
    ids = list("Hi 9,\n中。é".encode()) + [256, 0x7F, 0xC0, 0xFF, 0x00]
    assert byte_categories(ids).tolist() == [
        "uppercase", "lowercase", "space", "digit", "punctuation", "newline",
        "cjk_lead", "continuation", "continuation",       # 中 E4 B8 AD
        "other_lead", "continuation", "continuation",     # 。 E3 80 82 (CJK punctuation, not an ideograph)
        "other_lead", "continuation",                     # é C3 A9
        "separator", "other", "other", "other", "other",
    ]
    assert set(byte_categories(list(range(257))).tolist()) <= set(BYTE_CATEGORIES)


def test_byte_categories_cjk_needs_whole_sequence():
    # a lead byte cut off by the end of the array cannot be shown to be CJK
    assert byte_categories(list("中".encode()[:2])).tolist() == ["other_lead", "continuation"]
    # Extension A and compatibility ideographs are CJK; a 4-byte Extension B ideograph is not a 3-byte lead
    assert byte_categories(list("㐀豈".encode())).tolist()[::3] == ["cjk_lead", "cjk_lead"]
    assert byte_categories(list("𠀀".encode())).tolist()[0] == "other_lead"
    assert is_cjk_char("𠀀") and is_cjk_char("中") and not is_cjk_char("。")


ALPHABET = list(string.printable) + list("中文字人工智能是一个分支㐀豈。，é€😀ß") + ["\x00", "\x7f"]


@FAST
@given(st.text(alphabet=ALPHABET, min_size=1, max_size=40))
def test_byte_categories_match_naive(text):
    ids = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    assert byte_categories(ids).tolist() == naive_byte_categories(text)


def test_byte_categories_bad_input():
    with pytest.raises(InputError, match="token id 300 is not a byte-level id.*subword_categories"):
        byte_categories([65, 300])
    with pytest.raises(InputError, match="token id -1"):
        byte_categories([-1])
    with pytest.raises(InputError, match="is empty"):
        byte_categories([])
    with pytest.raises(InputError, match="1-D"):
        byte_categories(np.zeros((2, 2), dtype=int))
    with pytest.raises(InputError, match="integers"):
        byte_categories(np.array([65.5]))


# ---------------------------------------------------------------- subword_categories

def test_subword_categories_hand_case():
    tokens = ["<|endoftext|>", "The", "Ġcat", "s", "Ġ42", "1", ",", "Ġ.", "Ċ", "ĠĠ", "▁dog", "▁", "<0x0A>", "ing", "Ġ$"]
    assert subword_categories(tokens, special={"<|endoftext|>"}).tolist() == [
        "special", "continuation", "word_initial", "continuation", "number", "number", "punctuation",
        "punctuation", "whitespace", "whitespace", "word_initial", "whitespace", "whitespace",
        "continuation", "punctuation",
    ]
    assert subword_categories([" New", " York", "中文", "，", "<0x2C>", "<0xE4>"]).tolist() == [
        "word_initial", "word_initial", "continuation", "punctuation", "punctuation", "continuation",
    ]


def test_subword_categories_bad_input():
    with pytest.raises(InputError, match="single str"):
        subword_categories("Ġcat")
    with pytest.raises(InputError, match="is empty"):
        subword_categories([])
    with pytest.raises(InputError, match="token 1 is int, not str"):
        subword_categories(["a", 5])


# ---------------------------------------------------------------- increments_by_category

def naive_by_category(inc, cats):
    """{label: (mean, median, count)} for one head, from plain lists."""
    groups: dict[str, list[float]] = {}
    for value, cat in zip(inc, cats):
        if not np.isnan(value):
            groups.setdefault(cat, []).append(float(value))
    return {cat: (sum(v) / len(v), float(np.median(v)), len(v)) for cat, v in groups.items()}


def test_by_category_hand_case():
    inc = np.array([0.8, 1.05, 0.6, 2.0, 1.0, np.nan])
    cats = ["lowercase", "space", "lowercase", "newline", "uppercase", "lowercase"]
    r = increments_by_category(inc, cats)
    assert r.labels == ("lowercase", "uppercase", "space", "newline")  # BYTE_CATEGORIES order
    np.testing.assert_allclose(r.mean, [0.7, 1.0, 1.05, 2.0])
    np.testing.assert_allclose(r.median, [0.7, 1.0, 1.05, 2.0])
    assert r.count.tolist() == [2, 1, 1, 1]  # the NaN increment is skipped
    assert r.as_dict()["lowercase"] == {"mean": pytest.approx(0.7), "median": pytest.approx(0.7), "count": 2}


def test_by_category_per_head_and_overall():
    inc = np.array([[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0]]])  # (1, 2, 4)
    cats = np.array(["a", "b", "a", "a"])
    r = increments_by_category(inc, cats)
    assert r.labels == ("a", "b")  # labels outside the known sets: sorted
    assert r.mean.shape == (1, 2, 2)
    np.testing.assert_allclose(r.mean[0], [[8 / 3, 2.0], [7.0, 6.0]])
    np.testing.assert_allclose(r.median[0], [[3.0, 2.0], [7.0, 6.0]])
    np.testing.assert_allclose(r.overall_mean, [np.mean([1, 3, 4, 5, 7, 9]), 4.0])
    np.testing.assert_allclose(r.overall_median, [4.5, 4.0])
    assert r.overall_count.tolist() == [6, 2]


@FAST
@given(
    st.integers(1, 30).flatmap(
        lambda t: st.tuples(
            hnp.arrays(np.float64, (2, 3, t), elements=st.one_of(st.floats(-5, 5), st.just(np.nan))),
            st.lists(st.sampled_from(["lowercase", "space", "cjk_lead", "zz"]), min_size=t, max_size=t),
        )
    )
)
def test_by_category_matches_naive(case):
    inc, cats = case
    r = increments_by_category(inc, np.array(cats))
    for l in range(inc.shape[0]):
        for h in range(inc.shape[1]):
            expected = naive_by_category(inc[l, h], cats)
            for i, label in enumerate(r.labels):
                if label in expected:
                    mean, median, count = expected[label]
                    assert r.mean[l, h, i] == pytest.approx(mean)
                    assert r.median[l, h, i] == pytest.approx(median)
                    assert r.count[l, h, i] == count
                else:
                    assert np.isnan(r.mean[l, h, i]) and r.count[l, h, i] == 0
    pooled = naive_by_category(inc.reshape(-1), cats * (inc.shape[0] * inc.shape[1]))
    for i, label in enumerate(r.labels):
        assert r.overall_count[i] == pooled.get(label, (0, 0, 0))[2]


def test_by_category_bad_input():
    with pytest.raises(InputError, match="increments covers 3 tokens but categories covers 2"):
        increments_by_category(np.zeros(3), ["a", "b"])
    with pytest.raises(InputError, match="str labels"):
        increments_by_category(np.zeros(2), np.array([1, 2]))
    with pytest.raises(InputError, match="shape \\(T,\\)"):
        increments_by_category(np.zeros(2), np.array([["a", "b"]]))
    with pytest.raises(InputError, match="contains inf"):
        increments_by_category(np.array([1.0, np.inf]), ["a", "b"])
