"""Spaced-token labels read as text: when not every token's label fits, the labels are whole words (or
contiguous pieces of one) of the input, never every k-th token, and no space mark sits on a tick."""

from __future__ import annotations

import html

import numpy as np
import pytest

from repo_lens.plots import SpacedTokensStyle, paper_figure, spaced_tokens_figure
from repo_lens.plots.gallery import synthetic_trace


def drawn_labels(fig) -> list[str]:
    return [html.unescape(str(text)) for trace in fig.data
            if isinstance(trace.meta, dict) and "labels_of_layer" in trace.meta for text in trace.text]


@pytest.mark.parametrize("paper", [False, True])
def test_labels_are_whole_words_or_contiguous_pieces_of_the_input(paper):
    trace = synthetic_trace(8, 2, 250)
    text = "".join(" " if token == "␣" else token for token in trace.tokens)
    words = text.split()
    fig = spaced_tokens_figure(trace, head=0)
    if paper:
        fig = paper_figure(fig, "icml-column")
    labels = drawn_labels(fig)
    assert labels, "the rows are drawn as marks with the words that fit"
    assert all(label and " " not in label and "␣" not in label for label in labels), labels
    assert all(label in text for label in labels)  # contiguous pieces of the input
    assert all(any(label in word for word in words) for label in labels)  # never across a space
    whole = [label for label in labels if label in words]
    assert len(whole) >= 0.8 * len(labels), labels
    assert np.mean([len(label) for label in labels]) >= 3  # words, not single bytes


def test_a_word_whose_tokens_lie_apart_is_labelled_as_pieces_that_lie_together():
    from repo_lens.trace import Trace

    tokens = list("ab") + ["␣"] * 4 + list("cdef") + ["␣"] + list("xy") * 40
    z = np.arange(len(tokens), dtype=np.float32) * 30
    z[8:10] += 1200  # "ef" of the word "cdef" far to the right
    fig = spaced_tokens_figure(Trace(tokens=tokens, token_ids=np.arange(len(tokens)) % 256,
                                     positions=z[None, None, :], layer_kinds=["repo"]),
                               scale="shared", style=SpacedTokensStyle(connect=False, width=600))
    labels = drawn_labels(fig)
    assert "cdef" not in labels and "cd" in labels and "ef" in labels, labels
