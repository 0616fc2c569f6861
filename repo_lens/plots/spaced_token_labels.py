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

from repo_lens.plots.labels import LABEL_GAP_PX, WORD_BREAKS, label_width_px, place_labels, words_of_tokens


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
    widths = LabelWidths(look.font_size)
    widths_of: dict[int, np.ndarray] = {}
    fits = []
    for row in rows:
        if id(row.display) not in widths_of:  # the rows of a new figure share one display array
            widths_of[id(row.display)] = widths.of(row.display.tolist())
        fits.append(all_labels_fit(row.x, widths_of[id(row.display)], axis_range, look.plot_width,
                                   limit=label_limit, inside=look.label_inside))
    if all(fits):
        return [RowLabels(row.x, row.display, True) for row in rows]
    words_of: dict[int, WordTable] = {}  # the words of each distinct token text, split once per figure
    out = []
    for row, fit in zip(rows, fits):
        if fit and (tokens is None or len(row.x) == len(tokens[1])):  # every token fits: all but the spaces
            keep = np.char.strip(row.display.astype(str), WORD_BREAKS) != ""
            out.append(RowLabels(row.x[keep], row.display[keep], False))
            continue
        texts = tokens[1] if tokens is not None else row.display
        key = id(texts) if tokens is not None else id(row.display)
        if key not in words_of:
            words_of[key] = WordTable.of(list(texts), None if tokens is not None else _row_index(row),
                                         start=tokens[0] if tokens is not None else 0, widths=widths)
        out.append(word_labels(row, axis_range, look, label_limit, words=words_of[key], widths=widths))
    return out


def all_labels_fit(x: np.ndarray, widths_px: np.ndarray, axis_range: tuple[float, float], plot_width: float, *,
                   limit: int, inside: bool = False, gap_px: float = LABEL_GAP_PX) -> bool:
    """Whether :func:`repo_lens.plots.labels.place_labels` would draw every label: all inside the range,
    at most ``limit``, and no two neighbours (in x order) closer than their half-widths and the gap.

    >>> all_labels_fit(np.array([0.0, 5.0, 10.0]), np.array([20.0, 20.0, 20.0]), (0.0, 10.0), 100, limit=10)
    True
    >>> all_labels_fit(np.array([0.0, 1.0, 10.0]), np.array([20.0, 20.0, 20.0]), (0.0, 10.0), 100, limit=10)
    False
    """
    x = np.asarray(x, dtype=np.float64)
    low, high = axis_range
    if len(x) > limit or not (np.isfinite(x) & (x >= low) & (x <= high)).all():
        return False
    centre = (x - low) * (plot_width / (high - low))
    half = np.asarray(widths_px, dtype=np.float64) / 2
    if inside and ((centre - half < 0) | (centre + half > plot_width)).any():
        return False
    order = np.argsort(centre, kind="stable")
    left, right = (centre - half)[order], (centre + half)[order]
    return bool((right[:-1] + gap_px <= left[1:]).all())


class LabelWidths:
    """:func:`repo_lens.plots.labels.label_width_px` of (HTML-escaped) label texts at one font size,
    each distinct text measured once."""

    def __init__(self, font_size: float) -> None:
        self.font_size = float(font_size)
        self._known: dict[str, float] = {}

    def __call__(self, text: str) -> float:
        width = self._known.get(text)
        if width is None:
            width = self._known[text] = label_width_px(html.unescape(text), self.font_size)
        return width

    def of(self, texts: list[str]) -> np.ndarray:
        return np.fromiter((self(text) for text in texts), dtype=np.float64, count=len(texts))


@dataclass(frozen=True)
class WordTable:
    """The words a sequence of tokens spells (:func:`repo_lens.plots.labels.words_of_tokens`), as arrays:
    the token index of each word's first and last token, its text and label width, and every token's
    text without its word breaks (to spell the pieces of a word whose tokens lie apart)."""

    ids: np.ndarray  # token index of each token (slot)
    low: np.ndarray  # token index of each word's first token
    high: np.ndarray  # ... and of its last
    text: list[str]
    width: np.ndarray  # px
    cores: list[str]  # each token's text, word breaks stripped

    @classmethod
    def of(cls, texts: list[str], ids: np.ndarray | None, *, start: int, widths: LabelWidths) -> WordTable:
        ids = np.arange(start, start + len(texts)) if ids is None else np.asarray(ids, dtype=np.int64)
        words = words_of_tokens(texts, ids)
        first = np.fromiter((slots[0] for slots, _ in words), dtype=np.int64, count=len(words))
        last = np.fromiter((slots[-1] for slots, _ in words), dtype=np.int64, count=len(words))
        text = [word for _, word in words]
        return cls(ids, ids[first], ids[last], text, widths.of(text), [token.strip(WORD_BREAKS) for token in texts])


def _row_index(row: Any) -> np.ndarray:
    return np.asarray(row.custom)[:, 0].astype(np.int64)


def word_labels(row: Any, axis_range: tuple[float, float], look: Any, label_limit: int,
                tokens: tuple[int, list[str]] | None = None, words: WordTable | None = None,
                widths: LabelWidths | None = None) -> RowLabels:
    """The words (or contiguous pieces of words) of ``row`` that fit, those with a highlighted token first.
    ``tokens`` = (index of the first, the display text of every token from it on) spells the words
    (else the row's own tokens do); ``words``: their :class:`WordTable`, when the caller has it already.
    All words of a row at once: a handful of array operations, whatever the number of words."""
    widths = widths or LabelWidths(look.font_size)
    index = _row_index(row)
    if words is None:
        start, texts = tokens if tokens is not None else (0, None)
        words = WordTable.of(list(texts) if texts is not None else row.display.tolist(),
                             None if texts is not None else index, start=start, widths=widths)
    px = (np.asarray(row.x, dtype=np.float64) - axis_range[0]) * (look.plot_width / (axis_range[1] - axis_range[0]))
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    # the row's slots of each word: those whose token index lies in the word's range, in index order
    begin = np.searchsorted(sorted_index, words.low)
    end = np.searchsorted(sorted_index, words.high, side="right")
    count = end - begin
    word_of = np.repeat(np.arange(len(count)), count)
    members = order[np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count) + np.repeat(begin, count)]
    finite = np.isfinite(px[members])
    members, word_of = members[finite], word_of[finite]
    if members.size == 0:
        return RowLabels(np.zeros(0), np.zeros(0, dtype=str), False)
    # a new piece starts at each word's first drawn slot and where its tokens jump apart by more than its label
    starts = np.ones(members.size, dtype=bool)
    same_word = word_of[1:] == word_of[:-1]
    starts[1:] = ~same_word | (np.abs(np.diff(px[members])) > words.width[word_of[1:]])
    piece_start = np.flatnonzero(starts)
    piece_word = word_of[piece_start]
    x = np.asarray(row.x, dtype=np.float64)[members]
    centre = (np.minimum.reduceat(x, piece_start) + np.maximum.reduceat(x, piece_start)) / 2
    highlighted = np.isin(members, np.asarray(row.first, dtype=np.int64))
    first = np.flatnonzero(np.logical_or.reduceat(highlighted, piece_start))
    pieces_of_word = np.bincount(piece_word, minlength=len(words.low))
    texts = np.asarray(words.text, dtype=object)[piece_word]
    keep = np.ones(piece_start.size, dtype=bool)
    split = np.flatnonzero(pieces_of_word[piece_word] > 1)
    if split.size:
        # each piece spells the tokens from its first drawn one to the next piece's (undrawn tokens share a
        # drawn one's pixel column), so the pieces of a word together spell it whole
        lowest = np.minimum.reduceat(index[members], piece_start)
        is_first = np.r_[True, piece_word[1:] != piece_word[:-1]]
        is_last = np.r_[piece_word[1:] != piece_word[:-1], True]
        a = np.where(is_first, np.searchsorted(words.ids, words.low[piece_word]), np.searchsorted(words.ids, lowest))
        b = np.where(is_last, np.searchsorted(words.ids, words.high[piece_word]) + 1, np.r_[a[1:], 0])
        for p in split.tolist():
            text = "".join(words.cores[a[p]:b[p]])
            texts[p] = text
            keep[p] = len(html.unescape(text)) >= 2
    if not keep.all():
        first = np.flatnonzero(np.isin(np.flatnonzero(keep), first))
        centre, texts = centre[keep], texts[keep]
    text_array = texts.astype(str)
    mask = place_labels(centre, widths.of(text_array.tolist()), axis_range, look.plot_width, first=first,
                        limit=label_limit, inside=look.label_inside)
    return RowLabels(centre[mask], text_array[mask], False)
