"""The labels over the rows of a spaced-token figure, so that what is shown reads as text.

When every token's label fits in every row, each token is labelled. Otherwise each row shows the whole
words that fit (:func:`repo_lens.plots.labels.words_of_tokens`), centred over their tokens and placed
greedily without overlap (:func:`repo_lens.plots.labels.place_labels`); a word whose tokens jump apart
(a learned position can move a token away from its neighbours) by more than the word's label is wide
gives the contiguous pieces between the jumps instead, those of two characters or more. Space tokens
get no label of their own over a tick mark ("␣" on a tick reads as "ψ"): the gap between words shows them.

Example:
    >>> from types import SimpleNamespace
    >>> row = SimpleNamespace(x=np.arange(9.0) * 5, display=np.array(list("ab␣␣␣cdef")),
    ...                       custom=np.arange(9.0)[:, None], first=np.zeros(0, dtype=np.int64))
    >>> look = SimpleNamespace(plot_width=200.0, font_size=10.0, label_inside=False)
    >>> labels = place_rows([row], (0.0, 180.0), look, 100)[0]   # 5.6 px apart: the letters do not fit
    >>> labels.text.tolist(), labels.x.tolist()
    (['ab', 'cdef'], [2.5, 32.5])
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np

from repo_lens.plots.labels import WORD_BREAKS, label_width_px, place_labels, words_of_tokens


@dataclass(frozen=True)
class RowLabels:
    """The labels drawn over a row: their x and text, and whether they are every token's own label."""

    x: np.ndarray
    text: np.ndarray
    every_token: bool


def place_rows(rows: list[Any], axis_range: tuple[float, float], look: Any, label_limit: int, *,
               tokens: tuple[int, list[str]] | None = None) -> list[RowLabels]:
    """The labels of each row (a spaced-token ``Row``) for ``look`` (plot width, label font size): every
    token's own when all fit in every row (no marks are drawn then), else words. ``tokens`` = (index of
    the first, the display text of every token from it on) spells the words where a row draws fewer
    marks than tokens (one per pixel column); without it each row's own tokens do."""
    widths_of: dict[int, np.ndarray] = {}
    fits = []
    for row in rows:
        if id(row.display) not in widths_of:  # the rows of a new figure share one display array
            widths_of[id(row.display)] = np.array([label_width_px(html.unescape(text), look.font_size)
                                                   for text in row.display.tolist()])
        fits.append(place_labels(row.x, widths_of[id(row.display)], axis_range, look.plot_width, first=row.first,
                                 limit=label_limit, inside=look.label_inside).all())
    if all(fits):
        return [RowLabels(row.x, row.display, True) for row in rows]
    shared_words = None  # every row spells the same shown tokens: split them into words once
    if tokens is not None:
        shared_words = _words_with_widths(tokens[1], np.arange(tokens[0], tokens[0] + len(tokens[1])), look)
    out = []
    for row, fit in zip(rows, fits):
        if fit and (tokens is None or len(row.x) == len(tokens[1])):  # every token fits: all but the spaces
            keep = np.char.strip(row.display.astype(str), WORD_BREAKS) != ""
            out.append(RowLabels(row.x[keep], row.display[keep], False))
        else:
            out.append(word_labels(row, axis_range, look, label_limit, tokens, shared_words))
    return out


def _words_with_widths(texts: list[str], ids: np.ndarray, look: Any) -> list[tuple[list[int], str, float]]:
    return [(slots, word, label_width_px(html.unescape(word), look.font_size))
            for slots, word in words_of_tokens(texts, ids)]


def word_labels(row: Any, axis_range: tuple[float, float], look: Any, label_limit: int,
                tokens: tuple[int, list[str]] | None = None,
                words: list[tuple[list[int], str, float]] | None = None) -> RowLabels:
    """The words (or contiguous pieces of words) of ``row`` that fit, those with a highlighted token first.
    ``words``: the words of ``tokens`` with their widths, when the caller has them already."""
    index = np.asarray(row.custom)[:, 0].astype(np.int64)
    start, texts = tokens if tokens is not None else (0, None)
    if texts is None:
        texts, ids = row.display.tolist(), index
    else:
        ids = np.arange(start, start + len(texts))
    if words is None:
        words = _words_with_widths(texts, ids, look)
    px = (np.asarray(row.x, dtype=np.float64) - axis_range[0]) * (look.plot_width / (axis_range[1] - axis_range[0]))
    order = np.argsort(index, kind="stable")
    highlighted = set(np.asarray(row.first).tolist())
    labels: list[str]
    centres, labels, first = [], [], []
    for slots, word, word_px in words:
        low, high = ids[slots[0]], ids[slots[-1]]
        mine = order[np.searchsorted(index[order], low):np.searchsorted(index[order], high, side="right")]
        mine = mine[np.isfinite(px[mine])]
        jumps = np.flatnonzero(np.abs(np.diff(px[mine])) > word_px) + 1
        pieces = [piece for piece in np.split(mine, jumps) if piece.size]
        # each piece spells the tokens from its first drawn one to the next piece's (undrawn tokens share
        # a drawn one's pixel column), so the pieces of a word together spell it whole
        bounds = [int(np.searchsorted(ids, low))] + [int(np.searchsorted(ids, index[piece].min())) for piece in
                                                     pieces[1:]] + [int(np.searchsorted(ids, high)) + 1]
        for piece, a, b in zip(pieces, bounds[:-1], bounds[1:]):
            text = "".join(token.strip(WORD_BREAKS) for token in texts[a:b])
            if not text or (len(pieces) > 1 and len(html.unescape(text)) < 2):
                continue
            if highlighted.intersection(piece.tolist()):
                first.append(len(labels))
            centres.append((row.x[piece].min() + row.x[piece].max()) / 2)
            labels.append(text)
    if not labels:
        return RowLabels(np.zeros(0), np.zeros(0, dtype=str), False)
    centre = np.asarray(centres, dtype=np.float64)
    widths = [label_width_px(html.unescape(text), look.font_size) for text in labels]
    mask = place_labels(centre, widths, axis_range, look.plot_width, first=first, limit=label_limit,
                        inside=look.label_inside)
    return RowLabels(centre[mask], np.asarray(labels, dtype=str)[mask], False)
