"""Which text labels of a row fit without overlapping: a width estimate and a greedy placement."""

from __future__ import annotations

import unicodedata
from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from repo_lens.errors import InputError

# advance of a character in em: DejaVu Sans' Latin letters average about 0.6 em (M and W reach 0.86–1.0),
# so 0.65 over-estimates ordinary text; East Asian wide and fullwidth characters are 1 em
NARROW_CHAR_EM = 0.65
WIDE_CHAR_EM = 1.0
LABEL_GAP_PX = 3.0


def label_width_px(text: str, font_size: float) -> float:
    """Estimated width in pixels of ``text`` drawn at ``font_size`` px: 0.65 em per character, 1 em per
    East Asian wide or fullwidth character (at least one character wide, so an empty label still takes room).

    An upper bound on purpose, kept beside the measured :func:`repo_lens.plots.paper_layout.text_width_px`:
    a browser draws the app's labels in whichever sans face it has, and labels placed for a wider face
    never meet in a narrower one (a measure of DejaVu Sans would let them meet in a wider fallback).

    >>> label_width_px("abc", 10), label_width_px("中文", 10)
    (19.5, 20.0)
    """
    em = sum(WIDE_CHAR_EM if unicodedata.east_asian_width(char) in "WF" else NARROW_CHAR_EM for char in text)
    return max(em, NARROW_CHAR_EM) * font_size


def place_labels(
    x: np.ndarray,
    widths_px: Sequence[float] | np.ndarray,
    x_range: tuple[float, float],
    plot_width_px: float,
    *,
    first: Sequence[int] | np.ndarray = (),
    gap_px: float = LABEL_GAP_PX,
    limit: int | None = None,
    inside: bool = False,
) -> np.ndarray:
    """Boolean mask of the labels to draw: each centred on its ``x``, none overlapping another (with
    ``gap_px`` between), only points inside ``x_range`` (with ``inside``, only labels wholly inside it).
    Greedy from left to right, after the indices
    in ``first`` (placed first, also left to right, so they win against their neighbours). At most
    ``limit`` labels. ``plot_width_px`` is the drawing area's width, which ``x_range`` spans.

    >>> place_labels(np.array([0.0, 1.0, 3.0, 10.0]), [20, 20, 20, 20], (0.0, 10.0), 100).tolist()
    [True, False, True, True]
    >>> place_labels(np.array([0.0, 1.0, 3.0, 10.0]), [20, 20, 20, 20], (0.0, 10.0), 100, first=[1]).tolist()
    [False, True, False, True]
    """
    x = np.asarray(x, dtype=np.float64)
    widths = np.asarray(widths_px, dtype=np.float64)
    if widths.shape != x.shape:
        raise InputError(f"widths_px has shape {widths.shape}; give one width per x, shape {x.shape}")
    low, high = float(x_range[0]), float(x_range[1])
    if not (np.isfinite(low) and np.isfinite(high) and high > low):
        raise InputError(f"x_range must be two finite numbers (low, high) with high > low, got {x_range}")
    if not plot_width_px > 0:
        raise InputError(f"plot_width_px must be > 0, got {plot_width_px}")
    centre = (x - low) * (plot_width_px / (high - low))
    left, right = centre - widths / 2, centre + widths / 2
    visible = np.isfinite(x) & (x >= low) & (x <= high)
    if inside:
        visible &= (left >= 0) & (right <= plot_width_px)
    chosen = np.zeros(x.shape, dtype=bool)
    priority = np.zeros(x.shape, dtype=bool)
    priority[np.asarray(first, dtype=np.int64)] = True
    cap = len(x) if limit is None else int(limit)
    starts: list[float] = []  # placed intervals, disjoint and sorted
    ends: list[float] = []
    for group in (priority, ~priority):
        candidates = np.flatnonzero(visible & group)
        for index in candidates[np.argsort(centre[candidates], kind="stable")].tolist():
            if len(starts) >= cap:
                return chosen
            a, b = left[index], right[index]
            slot = bisect_left(starts, a)
            if slot > 0 and ends[slot - 1] + gap_px > a:
                continue
            if slot < len(starts) and b + gap_px > starts[slot]:
                continue
            starts.insert(slot, a)
            ends.insert(slot, b)
            chosen[index] = True
    return chosen


# what separates words in token text: spaces and newlines as byte models and BPE tokenizers show them
WORD_BREAKS = "␣↵ \t\n\u0120\u010a\u2581"


def words_of_tokens(texts: Sequence[str], token_index: Sequence[int] | np.ndarray) -> list[tuple[list[int], str]]:
    """The words a row of tokens spells: (the slots of its tokens, its text), in order. A word ends at a
    token that is or starts with a space or newline (``WORD_BREAKS``; the break itself is no part of any
    word) and where ``token_index`` skips a token (a sampled row), so each word's text is a contiguous
    piece of the input.

    >>> words_of_tokens(["Ma", "rie", "␣", "Cu", "rie", "\u0120was"], [0, 1, 2, 3, 4, 5])
    [([0, 1], 'Marie'), ([3, 4], 'Curie'), ([5], 'was')]
    >>> words_of_tokens(["a", "b", "c"], [0, 1, 5])
    [([0, 1], 'ab'), ([2], 'c')]
    """
    words: list[tuple[list[int], str]] = []
    slots: list[int] = []
    text = ""
    previous = None
    for slot, (token, index) in enumerate(zip(texts, np.asarray(token_index).tolist())):
        core = token.strip(WORD_BREAKS)
        breaks_before = token[:1] in WORD_BREAKS or (previous is not None and index != previous + 1)
        if (breaks_before or not core) and slots:
            words.append((slots, text))
            slots, text = [], ""
        if core:
            slots.append(slot)
            text += core
        if core and token[-1:] in WORD_BREAKS:
            words.append((slots, text))
            slots, text = [], ""
        previous = index
    if slots:
        words.append((slots, text))
    return words
