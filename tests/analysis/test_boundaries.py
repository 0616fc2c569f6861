"""boundary_auc, cjk_boundary_labels, jieba_words (seeds/002's Chinese word-boundary protocol):
a naive O(n^2) pairwise AUC, a naive per-character labeller, properties, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repo_lens.analysis import boundary_auc, cjk_boundary_labels, is_cjk_char, jieba_words
from repo_lens.errors import InputError

FAST = settings(max_examples=30, deadline=None)


def naive_auc(scores, labels):
    """P(positive > negative) + 0.5 P(tie), over every positive/negative pair."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def auc_case(min_t=2, max_t=40):
    """(scores (2, 3, T) of small ints with ties, labels (T,) 0/1 with both classes)."""
    def build(t):
        labels = st.lists(st.booleans(), min_size=t, max_size=t).filter(lambda y: 0 < sum(y) < len(y))
        scores = hnp.arrays(np.float64, (2, 3, t), elements=st.integers(-6, 6).map(float))
        return st.tuples(scores, labels.map(np.array))
    return st.integers(min_t, max_t).flatmap(build)


# ---------------------------------------------------------------- boundary_auc

def test_auc_hand_cases():
    assert boundary_auc(np.array([0.1, 0.9, 0.4, 0.4]), np.array([0, 1, 1, 0])) == 0.875
    assert boundary_auc(np.array([1.0, 2.0, 3.0, 4.0]), np.array([False, False, True, True])) == 1.0
    assert boundary_auc(np.array([4.0, 3.0, 2.0, 1.0]), np.array([False, False, True, True])) == 0.0
    assert boundary_auc(np.ones(4), np.array([0, 1, 0, 1])) == 0.5
    assert boundary_auc(np.array([1.0, 2.0]), np.array([0, 1])).shape == ()


def test_auc_unscored_tokens():
    scores = np.array([[9.0, 1.0, 2.0, -9.0, 3.0], [0.0, 3.0, 2.0, 0.0, 1.0]])
    as_nan = np.array([np.nan, 0.0, 1.0, np.nan, 1.0])
    as_minus_one = np.array([-1, 0, 1, -1, 1])
    mask = np.array([False, True, True, False, True])
    expected = [naive_auc(row[mask], as_minus_one[mask] == 1) for row in scores]
    np.testing.assert_allclose(boundary_auc(scores, as_nan), expected)
    np.testing.assert_allclose(boundary_auc(scores, as_minus_one), expected)
    np.testing.assert_allclose(boundary_auc(scores, as_minus_one == 1, scored=mask), expected)
    # NaN scores are fine where they are not scored (e.g. the first increment with origin=nan)
    scores[:, 0] = np.nan
    np.testing.assert_allclose(boundary_auc(scores, as_nan), expected)


@FAST
@given(auc_case())
def test_auc_matches_naive_pairwise(case):
    scores, labels = case
    got = boundary_auc(scores, labels)
    assert got.shape == (2, 3)
    for index in np.ndindex(2, 3):
        assert got[index] == pytest.approx(naive_auc(scores[index], labels), abs=1e-12)


def test_sklearn_roc_auc_is_pair_counting_with_ties():
    """The library's definition checked against brute force, then boundary_auc against the library."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(12)
    for n_tokens in (7, 40, 300):
        scores = rng.integers(-4, 5, size=(3, 4, n_tokens)).astype(np.float64)  # many ties
        scores[0, 0] = 0.25  # one head all ties
        labels = rng.integers(0, 2, size=n_tokens).astype(bool)
        labels[:2] = (True, False)
        scored = rng.random(n_tokens) < 0.8
        scored[:2] = True
        got = boundary_auc(scores, labels, scored=scored)
        assert got.shape == (3, 4)
        for head in np.ndindex(3, 4):
            library = roc_auc_score(labels[scored], scores[head][scored])
            assert library == pytest.approx(naive_auc(scores[head][scored], labels[scored]), abs=1e-12)
            assert got[head] == pytest.approx(library, abs=1e-12)
        assert got[0, 0] == 0.5


def test_auc_of_float32_scores_with_distinct_values_matches_sklearn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    labels = rng.random(2000) < 0.3
    scores = (rng.normal(size=(2, 2000)) + 0.5 * labels).astype(np.float32)
    expected = [roc_auc_score(labels, row) for row in scores]
    np.testing.assert_allclose(boundary_auc(scores, labels), expected, atol=1e-12)


@FAST
@given(auc_case())
def test_auc_of_negated_scores_is_one_minus(case):
    scores, labels = case
    np.testing.assert_allclose(boundary_auc(-scores, labels), 1.0 - boundary_auc(scores, labels), atol=1e-12)


@FAST
@given(auc_case(), st.one_of(st.integers(1, 1000).map(float), st.integers(-20, 20).map(lambda k: 2.0**k)))
def test_auc_invariant_to_positive_scaling(case, factor):
    scores, labels = case  # small integers: scaling by these factors is exact, ties are kept
    np.testing.assert_array_equal(boundary_auc(scores * factor, labels), boundary_auc(scores, labels))


@FAST
@given(auc_case(), st.integers(-1000, 1000).map(float))
def test_auc_invariant_to_shift(case, shift):
    scores, labels = case
    np.testing.assert_array_equal(boundary_auc(scores + shift, labels), boundary_auc(scores, labels))


def test_auc_bad_input():
    with pytest.raises(InputError, match="both classes.*0 positive and 3 negative"):
        boundary_auc(np.arange(3.0), np.array([0, 0, 0]))
    with pytest.raises(InputError, match="both classes"):
        boundary_auc(np.arange(3.0), np.array([1.0, np.nan, np.nan]))
    with pytest.raises(InputError, match="scores covers 3 tokens but labels covers 2"):
        boundary_auc(np.arange(3.0), np.array([0, 1]))
    with pytest.raises(InputError, match="label 2 at token 1 is not 0/1"):
        boundary_auc(np.arange(3.0), np.array([0, 2, 1]))
    with pytest.raises(InputError, match="NaN at scored tokens"):
        boundary_auc(np.array([np.nan, 1.0, 2.0]), np.array([0, 1, 0]))
    with pytest.raises(InputError, match="contains inf"):
        boundary_auc(np.array([np.inf, 1.0, 2.0]), np.array([0, 1, 0]))
    with pytest.raises(InputError, match="scored must be a bool mask"):
        boundary_auc(np.arange(3.0), np.array([0, 1, 0]), scored=np.array([1, 1, 1]))
    with pytest.raises(InputError, match="labels must be bool or numeric"):
        boundary_auc(np.arange(2.0), np.array(["yes", "no"]))
    with pytest.raises(InputError, match="is empty"):
        boundary_auc(np.zeros((2, 0)), np.zeros(0))


# ---------------------------------------------------------------- cjk_boundary_labels

def naive_labels(text, spans, words):
    """Straight from the protocol, one character at a time."""
    word_end, position = set(), 0
    for word in words:
        position += len(word)
        word_end.add(position - 1)
    scored = [False] * len(spans)
    labels = [False] * len(spans)
    for i in range(1, len(text)):
        if not (is_cjk_char(text[i - 1]) and is_cjk_char(text[i])):
            continue
        starters = [t for t, (a, b) in enumerate(spans) if a == i and b > a]
        if starters:
            scored[starters[0]] = True
            labels[starters[0]] = (i - 1) in word_end
    return scored, labels


def byte_spans(text):
    return [(i, i + 1) for i, char in enumerate(text) for _ in char.encode("utf-8")]


def test_labels_byte_level_hand_case():
    text = "你好，世界 AI人工智能"
    words = ["你好", "，", "世界", " ", "AI", "人工", "智能"]
    r = cjk_boundary_labels(text, byte_spans(text), words)
    # scored gaps: 你|好 (first byte of 好 = token 3), 世|界 (token 12), 人|工 (token 21), 工|智 (24), 智|能 (27)
    assert r.scored.nonzero()[0].tolist() == [3, 12, 21, 24, 27]
    assert r.labels[r.scored].tolist() == [False, False, False, True, False]
    assert not r.labels[~r.scored].any()


def test_labels_subword_adaptation():
    text = "人工智能是分支"
    words = ["人工智能", "是", "分支"]
    spans = [(0, 0), (0, 2), (2, 4), (4, 5), (5, 7)]  # BOS (empty span), then multi-character tokens
    r = cjk_boundary_labels(text, spans, words)
    # gaps before chars 2, 4, 5 begin tokens 2, 3, 4; the gaps inside 人工 / 智能 / 分支 are not scored
    assert r.scored.tolist() == [False, False, True, True, True]
    assert r.labels.tolist() == [False, False, False, True, True]
    # byte-fallback pieces of one character share its span: the first piece scores the gap
    r = cjk_boundary_labels("人工", [(0, 1), (1, 2), (1, 2), (1, 2)], ["人", "工"])
    assert r.scored.tolist() == [False, True, False, False] and r.labels.tolist() == [False, True, False, False]


CJK_TEXT = st.text(alphabet=list("人工智能是计算机科学的一个分支，。 ab"), min_size=1, max_size=30)


@FAST
@given(CJK_TEXT.flatmap(lambda text: st.tuples(
    st.just(text),
    st.lists(st.integers(1, 3), min_size=len(text), max_size=len(text)),   # word lengths
    st.lists(st.integers(1, 3), min_size=len(text), max_size=len(text)),   # token lengths
)))
def test_labels_match_naive(case):
    text, word_lengths, token_lengths = case
    words, start = [], 0
    for length in word_lengths:
        if start < len(text):
            words.append(text[start:start + length])
            start += length
    spans, start = [], 0
    for length in token_lengths:
        if start < len(text):
            spans.append((start, min(start + length, len(text))))
            start += length
    r = cjk_boundary_labels(text, spans, words)
    scored, labels = naive_labels(text, spans, words)
    assert r.scored.tolist() == scored
    assert r.labels.tolist() == labels
    r = cjk_boundary_labels(text, byte_spans(text), words)
    scored, labels = naive_labels(text, byte_spans(text), words)
    assert r.scored.tolist() == scored and r.labels.tolist() == labels


def test_labels_end_to_end_auc():
    """Increments that are larger at the first byte after a word end give AUC 1 against the labels."""
    text = "人工智能是计算机科学的一个分支。"
    words = jieba_words(text)
    spans = byte_spans(text)
    r = cjk_boundary_labels(text, spans, words)
    increments = np.where(r.labels, 2.0, 0.8)[None, None] + np.zeros((2, 1, 1))
    increments[1] = 1.0  # a RoPE-like layer: all ties, chance
    np.testing.assert_array_equal(boundary_auc(increments, r.labels, scored=r.scored), [[1.0], [0.5]])


def test_labels_bad_input():
    with pytest.raises(InputError, match="do not concatenate to text \\(first difference at char 2\\)"):
        cjk_boundary_labels("人工智能", [(i, i + 1) for i in range(4)], ["人工", "只能"])
    with pytest.raises(InputError, match="do not concatenate"):
        cjk_boundary_labels("人工智能", [(i, i + 1) for i in range(4)], ["人工"])
    with pytest.raises(InputError, match="single str"):
        cjk_boundary_labels("人工", [(0, 1), (1, 2)], "人工")
    with pytest.raises(InputError, match="token 1 has char span \\(1, 5\\), outside"):
        cjk_boundary_labels("人工", [(0, 1), (1, 5)], ["人工"])
    with pytest.raises(InputError, match="shape \\(T, 2\\)"):
        cjk_boundary_labels("人工", [0, 1], ["人工"])
    with pytest.raises(InputError, match="non-empty str"):
        cjk_boundary_labels("", [(0, 0)], [])


# ---------------------------------------------------------------- jieba_words

def test_jieba_words():
    text = "人工智能是计算机科学的一个分支。"
    assert jieba_words(text) == ["人工智能", "是", "计算机科学", "的", "一个", "分支", "。"]  # as in seeds/002
    mixed = "我在New York住了 3年。\n第二行"
    assert "".join(jieba_words(mixed)) == mixed
    with pytest.raises(InputError, match="non-empty str"):
        jieba_words("")
