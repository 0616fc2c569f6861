"""Issue 49, item 1: the split of each head's position variance into index, content class, span and rest,
against hand-computed cases and its invariants."""

from __future__ import annotations

import numpy as np
import pytest

from repo_lens.analysis import CONTENT_CLASSES, content_classes, position_variance_shares
from repo_lens.errors import InputError


def _check_invariants(result) -> None:
    shares = np.stack(list(result.shares().values()))
    finite = np.isfinite(shares).all(axis=0)
    assert ((shares[:, finite] >= 0) & (shares[:, finite] <= 1)).all()
    np.testing.assert_allclose(shares[:, finite].sum(axis=0), 1.0, atol=1e-9)


def test_a_line_is_all_index_whatever_its_slope_offset_and_classes():
    t = np.arange(50.0)
    z = np.stack([np.stack([3.0 * t - 7.0, -0.25 * t + 100.0, t])])  # 1 layer, 3 heads
    result = position_variance_shares(z, np.asarray(["x", "y", "z", "w", "v"] * 10))
    np.testing.assert_allclose(result.index, 1.0, atol=1e-12)
    np.testing.assert_allclose(result.content, 0.0, atol=1e-12)
    np.testing.assert_allclose(result.rest, 0.0, atol=1e-12)
    assert result.span is None and result.span_name is None
    _check_invariants(result)


def test_positions_that_are_a_function_of_the_class_are_all_content():
    classes = np.asarray(list("abcba" * 6 + "abcba"[::-1] * 6))  # a palindrome: no trend along the text
    value = {"a": 2.0, "b": -1.0, "c": 5.0}
    z = np.asarray([value[c] for c in classes])[None, None]
    result = position_variance_shares(z, classes)
    assert result.index[0, 0] == pytest.approx(0.0, abs=1e-12)
    assert result.content[0, 0] == pytest.approx(1.0, abs=1e-12)
    assert result.rest[0, 0] == pytest.approx(0.0, abs=1e-12)
    # the class means of what the line leaves: the class values less their mean over the text
    mean = z.mean()
    np.testing.assert_allclose(result.class_means[0, 0], [value[c] - mean for c in result.classes], atol=1e-12)


def test_a_class_function_with_a_trend_splits_between_index_and_content_by_hand():
    classes = np.asarray(["a"] * 5 + ["b"] * 5)
    z = np.where(classes == "a", 0.0, 1.0)[None, None]  # a step: partly a line, the rest the class
    result = position_variance_shares(z, classes)
    t = np.arange(10.0)
    r = np.corrcoef(t, z[0, 0])[0, 1]
    assert result.index[0, 0] == pytest.approx(r * r, abs=1e-12)  # the own line's R², by hand: 0.75
    assert result.content[0, 0] == pytest.approx(1 - r * r, abs=1e-12)
    assert result.rest[0, 0] == pytest.approx(0.0, abs=1e-12)


def test_noise_is_almost_all_rest():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, 3, 20_000))
    classes = rng.choice(list(CONTENT_CLASSES), size=20_000)
    result = position_variance_shares(z, classes, spans=(5_000, 5_400))
    assert result.index.max() < 2e-3 and result.content.max() < 2e-3 and result.span.max() < 2e-3
    assert result.rest.min() > 0.99
    _check_invariants(result)


def test_the_span_offset_is_found_beyond_the_line_and_the_classes():
    rng = np.random.default_rng(1)
    t = np.arange(400.0)
    classes = rng.choice(["digit", "other"], size=400)
    z = 0.01 * t + np.where(classes == "digit", 1.0, 0.0) + rng.normal(scale=0.1, size=400)
    z[200:210] += 6.0  # the needle
    result = position_variance_shares(z[None, None], classes, spans=(200, 210), span_name="needle")
    assert result.span_name == "needle"
    assert result.span[0, 0] > 0.3 and result.rest[0, 0] < 0.05
    assert result.span_offset[0, 0] == pytest.approx(6.0, abs=0.15)
    _check_invariants(result)
    # the order is index, content, span: a span that a class already covers adds nothing
    covered = position_variance_shares(z[None, None], classes, spans=classes == "digit")
    assert covered.span[0, 0] == pytest.approx(0.0, abs=1e-9)


def test_several_texts_pool_within_text_variance_and_ignore_offsets_between_texts():
    rng = np.random.default_rng(2)
    texts, classes, spans = [], [], []
    for length, shift in ((300, 0.0), (120, 50.0), (500, -9.0)):
        c = rng.choice(["a", "b", "c"], size=length)
        texts.append(rng.normal(size=(2, 2, length)) + shift)  # an offset per text: no share of anything
        classes.append(c)
        spans.append((length // 2, length // 2 + 5))
    result = position_variance_shares(texts, classes, spans)
    assert result.n_texts == 3 and result.n_tokens == 920
    assert result.rest.min() > 0.97
    _check_invariants(result)
    one = position_variance_shares(texts[0], classes[0], spans[0])  # one text alone: as passed bare
    assert one.n_texts == 1 and one.n_tokens == 300


def test_constant_positions_have_no_shares_and_rope_is_all_index():
    z = np.stack([np.full((2, 30), 4.0), np.broadcast_to(np.arange(30.0), (2, 30))])  # NoPE-like, then RoPE
    result = position_variance_shares(z, ["a"] * 30)
    assert np.isnan(result.index[0]).all() and np.isnan(result.rest[0]).all()
    np.testing.assert_allclose(result.index[1], 1.0)
    assert [row["layer"] for row in result.rows()] == [0, 0, 1, 1] and set(result.rows()[0]) == {
        "layer", "head", "index", "content", "rest", "variance"}


def test_content_classes_of_bytes_and_subwords():
    assert content_classes(list("Hi 42!")).tolist() == ["word start", "other", "space", "digit", "digit",
                                                       "punctuation"]
    assert content_classes(["Ġthe", "Ġcat", "s", "Ġ1", "Ċ", "▁dog", "<|endoftext|>"]).tolist() == [
        "word start", "word start", "other", "digit", "space", "word start", "other"]
    assert content_classes(["x", "↵", "y", "-", "z"]).tolist() == ["word start", "space", "word start",
                                                                  "punctuation", "word start"]


def test_bad_inputs_say_what_to_pass():
    z = np.zeros((1, 1, 4)) + np.arange(4.0)
    with pytest.raises(InputError, match="one label per token"):
        position_variance_shares(z, ["a"] * 3)
    with pytest.raises(InputError, match="outside its 4 tokens"):
        position_variance_shares(z, ["a"] * 4, spans=(2, 9))
    with pytest.raises(InputError, match="shape"):
        position_variance_shares(np.zeros((4,)), ["a"] * 4)
    with pytest.raises(InputError, match="one per text"):
        position_variance_shares([z, z], [["a"] * 4] * 2, spans=[(0, 1)])
    with pytest.raises(InputError, match="not str"):
        content_classes([1, 2])
