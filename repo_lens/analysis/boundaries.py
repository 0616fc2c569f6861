"""Word-boundary ROC-AUC of position increments (the Chinese protocol of "Learned position increments",
Brendan Long).

Two entry points, because the post's script and a general corpus study need different units:

- **The post's script, exactly** (``byte_boundary_analysis.py``, Part 2): :func:`boundary_windows` cuts each
  held-out text into character-aligned windows of at most 512 UTF-8 bytes, each run through the model on
  its own; only the gaps between two CJK Unified Ideographs (U+4E00-U+9FFF, the script's range) inside one
  window are scored, by δ at the lead byte of the second character; the label is whether jieba's precise
  mode (``jieba.cut(text, cut_all=False)`` on the *whole* text) ends a word at the first character; texts
  are taken until at least ``max_gaps`` gaps are scored. :func:`window_boundary_auc` pools the windows'
  scores into one ROC-AUC per layer.
- **Any tokenizer, any text** (:func:`cjk_boundary_labels` + :func:`boundary_auc`): labels the tokens of one
  traced text against a given segmentation (gold or jieba), with the wider CJK set of :func:`is_cjk_char`
  (Extension A, compatibility and supplementary ideographs too) and subword tokens; the app and
  ``repo-lens analyze --study boundaries`` use it. Its numbers match the script's where the text is one
  window and holds no ideograph outside U+4E00-U+9FFF.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from sklearn.metrics import roc_auc_score

from repo_lens.analysis._checks import as_char_spans, as_float_array, as_list, check_same_length
from repo_lens.analysis.categories import is_cjk_char
from repo_lens.errors import InputError


def _scored_labels(labels: object, scored: object | None) -> tuple[np.ndarray, np.ndarray]:
    """(scored mask, bool labels) from bool/0-1 labels with NaN or -1 meaning "not scored"."""
    lab = np.asarray(labels)
    if lab.ndim != 1:
        raise InputError(f"labels has shape {lab.shape}; pass one label per token, shape (T,)")
    if lab.size == 0:
        raise InputError("labels is empty; pass one label per token")
    if lab.dtype.kind == "b":
        keep = np.ones(lab.shape, dtype=bool)
        positive = lab.copy()
    elif lab.dtype.kind in "iuf":
        keep = ~np.isnan(lab) & (lab != -1) if lab.dtype.kind == "f" else lab != -1
        bad = keep & (lab != 0) & (lab != 1)
        if bad.any():
            raise InputError(
                f"label {lab[bad][0].item()!r} at token {int(np.argmax(bad))} is not 0/1; labels must be "
                "bool or 0/1, with NaN or -1 for tokens that are not scored"
            )
        positive = keep & (lab == 1)
    else:
        raise InputError(f"labels must be bool or numeric (0/1, NaN/-1 = not scored); got dtype {lab.dtype}")
    if scored is not None:
        mask = np.asarray(scored)
        if mask.dtype.kind != "b" or mask.shape != lab.shape:
            raise InputError(
                f"scored must be a bool mask shaped like labels {lab.shape}; got {mask.dtype} {mask.shape}"
            )
        keep = keep & mask
    return keep, positive & keep


def boundary_auc(scores: np.ndarray, labels: np.ndarray, scored: np.ndarray | None = None) -> np.ndarray:
    """ROC-AUC of ``scores`` (..., T) for the positive tokens of ``labels`` (T,), over leading axes.

    AUC = P(score of a random positive > score of a random negative) + 0.5 P(tie), computed by
    ``sklearn.metrics.roc_auc_score`` with every head as one column of a multilabel problem (one
    call, ``average=None``; about 0.5 s for 16 x 16 heads x 10^4 scored gaps on one CPU core, where
    a Mann-Whitney rank formula would take a tenth of that). 0.5 is chance; above 0.5
    boundaries get larger increments, below 0.5 smaller ones. ``labels`` is bool or 0/1 with NaN or
    -1 for tokens not scored; ``scored`` (bool, (T,)) further restricts the tokens (e.g. the mask
    from :func:`cjk_boundary_labels`). Scored tokens must have finite scores and both classes must
    occur (a single class raises InputError: the AUC is undefined). Returns a float array of shape
    ``scores.shape[:-1]`` (0-d for 1-D).

    Example:
        >>> import numpy as np
        >>> boundary_auc(np.array([0.1, 0.9, 0.4, 0.4]), np.array([0, 1, 1, 0]))
        array(0.875)
        >>> boundary_auc(np.array([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]]), np.array([1.0, np.nan, 0.0]))
        array([1., 0.])
    """
    s = as_float_array(scores, "scores", allow_nan=True, shape_hint="pass scores of shape (..., T)")
    keep, positive = _scored_labels(labels, scored)
    check_same_length("scores", s.shape[-1], "labels", keep.shape[0])
    n_pos = int(positive.sum())
    n_neg = int(keep.sum()) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise InputError(
            f"AUC needs both classes among scored tokens; got {n_pos} positive and {n_neg} negative. "
            "Pass a longer text or check the labels"
        )
    kept = s[..., keep]
    if np.isnan(kept).any():
        raise InputError(
            "scores contain NaN at scored tokens; mark those tokens not scored (NaN/-1 label) "
            "or compute increments with a finite origin"
        )
    is_positive = positive[keep]
    columns = kept.reshape(-1, kept.shape[-1]).T  # (n_scored, heads)
    truth = np.broadcast_to(is_positive[:, None].astype(np.int8), columns.shape)
    auc = roc_auc_score(truth, columns, average=None)
    return np.asarray(auc, dtype=np.float64).reshape(kept.shape[:-1])


class BoundaryLabels(NamedTuple):
    """Per-token (T,) bool arrays: ``scored`` marks the tokens that score a CJK-CJK gap,
    ``labels`` whether that gap is a word boundary (False where not scored)."""

    scored: np.ndarray
    labels: np.ndarray


def _spans(token_char_spans: object, n_chars: int) -> np.ndarray:
    spans = as_char_spans(token_char_spans)
    bad = (spans[:, 0] < 0) | (spans[:, 1] < spans[:, 0]) | (spans[:, 1] > n_chars)
    if bad.any():
        t = int(np.argmax(bad))
        raise InputError(
            f"token {t} has char span {tuple(spans[t].tolist())}, outside 0 <= start <= end <= {n_chars} "
            "(len(text)); pass spans of this text"
        )
    return spans


def cjk_boundary_labels(
    text: str, token_char_spans: Sequence[tuple[int, int]] | np.ndarray, words: Sequence[str]
) -> BoundaryLabels:
    """Which tokens score a word boundary, and its label, by the learned-increments post's protocol.

    Only gaps between two CJK characters (no space or punctuation between) are scored. The gap
    before character i is scored by the increment of the *first* token of character i (its lead
    byte, for byte-level models); its label is whether character i-1 ends a word of ``words``.
    ``token_char_spans[t] = (start, end)`` is token t's character span (all bytes of a character
    share its span; empty spans, e.g. special tokens, are ignored). Subword adaptation: a gap is
    scored only if character i begins a token (that token's increment is the score); gaps inside
    a multi-character token are not scored. ``words`` must concatenate to ``text`` (a segmentation
    such as :func:`jieba_words` or a gold corpus). Feed the result to :func:`boundary_auc`:
    ``boundary_auc(increments, r.labels, scored=r.scored)``.

    Example:
        >>> text = "人工智能是分支"
        >>> spans = [(i, i + 1) for i in range(len(text)) for _ in range(3)]  # 3 bytes per character
        >>> r = cjk_boundary_labels(text, spans, ["人工智能", "是", "分支"])
        >>> r.scored.nonzero()[0].tolist(), r.labels[r.scored].tolist()
        ([3, 6, 9, 12, 15, 18], [False, False, False, True, True, False])
    """
    if not isinstance(text, str) or not text:
        raise InputError("text must be a non-empty str; pass the text the tokens came from")
    word_end = _word_ends(text, words)
    spans = _spans(token_char_spans, len(text))
    cjk = np.fromiter((is_cjk_char(c) for c in text), dtype=bool, count=len(text))
    gap_scorable = np.zeros(len(text), dtype=bool)  # gap before char i
    gap_scorable[1:] = cjk[1:] & cjk[:-1]
    # the first token that starts at each char (non-empty spans only)
    starts = spans[:, 0]
    nonempty = spans[:, 1] > starts
    candidates = np.nonzero(nonempty)[0]
    chars_started, first = np.unique(starts[candidates], return_index=True)  # earliest token per char
    first_token = np.full(len(text), -1, dtype=np.int64)
    first_token[chars_started] = candidates[first]
    chars = np.nonzero(gap_scorable & (first_token >= 0))[0]
    scored = np.zeros(len(spans), dtype=bool)
    labels = np.zeros(len(spans), dtype=bool)
    scored[first_token[chars]] = True
    labels[first_token[chars]] = word_end[chars - 1]
    return BoundaryLabels(scored=scored, labels=labels)


def _word_ends(text: str, words: object) -> np.ndarray:
    """(len(text),) bool: character i ends a word of ``words``, which must concatenate to ``text``."""
    words = as_list(words, "words", "jieba_words(text)")
    if not all(isinstance(word, str) for word in words):
        raise InputError("words must be strings; pass a segmentation of the text, e.g. jieba_words(text)")
    if "".join(words) != text:
        joined = "".join(words)
        at = next((i for i, (a, b) in enumerate(zip(joined, text)) if a != b), min(len(joined), len(text)))
        raise InputError(
            f"words do not concatenate to text (first difference at char {at}); pass a segmentation "
            "of this exact text, e.g. jieba_words(text)"
        )
    word_end = np.zeros(len(text), dtype=bool)
    word_end[np.cumsum([len(w) for w in words if w]) - 1] = True
    return word_end


def jieba_words(text: str) -> list[str]:
    """jieba's segmentation of ``text`` (default accurate mode with HMM), logging silenced.

    Example:
        >>> jieba_words("人工智能是计算机科学的一个分支。")
        ['人工智能', '是', '计算机科学', '的', '一个', '分支', '。']
    """
    try:
        import jieba
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise InputError("jieba is not installed; pip install jieba, or pass a gold segmentation") from exc
    jieba.setLogLevel(logging.WARNING)
    if not isinstance(text, str) or not text:
        raise InputError("text must be a non-empty str")
    return jieba.lcut(text)


CJK_UNIFIED = (0x4E00, 0x9FFF)  # the script's is_cjk: CJK Unified Ideographs only


def is_cjk_unified(char: str) -> bool:
    """True for a CJK Unified Ideograph, U+4E00-U+9FFF: the characters the post's script scores between.

    Example:
        >>> is_cjk_unified("中"), is_cjk_unified("㐀"), is_cjk_unified("。")
        (True, False, False)
    """
    return CJK_UNIFIED[0] <= ord(char) <= CJK_UNIFIED[1]


class GapWindow(NamedTuple):
    """One window of the post's protocol: the model reads ``byte_ids`` alone; gap g is scored by the
    increment at byte ``lead_bytes[g]`` (the lead byte of the character after the gap) with label
    ``labels[g]`` (a word ends before it). ``char_start``: the window's first character in text ``text_index``."""

    text_index: int
    char_start: int
    byte_ids: np.ndarray
    lead_bytes: np.ndarray
    labels: np.ndarray


def _check_max_bytes(max_bytes: object) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 4:
        raise InputError(f"max_bytes must be an int >= 4 (one UTF-8 character takes up to 4 bytes); got {max_bytes!r}")
    return int(max_bytes)


def cjk_gap_windows(text: str, words: Sequence[str], max_bytes: int = 512, text_index: int = 0) -> list[GapWindow]:
    """The post's windows of one text, with their scored gaps ("Learned position increments", Brendan Long;
    ``byte_boundary_analysis.py``): character-aligned windows of at most ``max_bytes`` UTF-8 bytes, cut
    greedily, each scoring the gaps between two CJK Unified Ideographs that both lie in it. ``words``: a
    segmentation of the whole text (the script: jieba's precise mode, :func:`jieba_words`).

    Example:
        >>> [w] = cjk_gap_windows("人工智能是分支", ["人工智能", "是", "分支"])
        >>> w.lead_bytes.tolist(), w.labels.tolist()
        ([3, 6, 9, 12, 15, 18], [False, False, False, True, True, False])
        >>> [len(w.byte_ids) for w in cjk_gap_windows("人工智能是分支", ["人工智能", "是", "分支"], max_bytes=8)]
        [6, 6, 6, 3]
    """
    if not isinstance(text, str) or not text:
        raise InputError("text must be a non-empty str; pass a held-out text")
    max_bytes = _check_max_bytes(max_bytes)
    word_end = _word_ends(text, words)
    try:
        encoded = [char.encode("utf-8") for char in text]
    except UnicodeEncodeError as error:
        raise InputError(f"text cannot be encoded as UTF-8 ({error.reason} at character {error.start})") from None
    cuts, size = [0], 0  # greedy, character-aligned: a window closes when the next character would not fit
    for index, piece in enumerate(encoded):
        if size and size + len(piece) > max_bytes:
            cuts.append(index)
            size = 0
        size += len(piece)
    cuts.append(len(text))
    cjk = [is_cjk_unified(char) for char in text]
    windows = []
    for start, end in zip(cuts[:-1], cuts[1:]):
        offsets = np.cumsum([0] + [len(piece) for piece in encoded[start:end]])
        gaps = [i for i in range(start + 1, end) if cjk[i - 1] and cjk[i]]  # char i follows the gap
        windows.append(GapWindow(
            text_index=text_index, char_start=start,
            byte_ids=np.frombuffer(b"".join(encoded[start:end]), dtype=np.uint8).astype(np.int64),
            lead_bytes=np.asarray([offsets[i - start] for i in gaps], dtype=np.int64),
            labels=np.asarray([word_end[i - 1] for i in gaps], dtype=bool)))
    return windows


def boundary_windows(texts: Sequence[str], max_bytes: int = 512, max_gaps: int | None = 40_000,
                     segment: Callable[[str], list[str]] | None = None) -> list[GapWindow]:
    """The post's windows over held-out texts: :func:`cjk_gap_windows` of each text in turn (``segment``:
    the segmentation, jieba's precise mode by default), stopping after the text that brings the scored
    gaps to ``max_gaps`` or more, as the script does (``None``: every text). Empty texts add nothing.
    The script's defaults: 512 bytes, 40,000 gaps, 300 documents.

    Example:
        >>> windows = boundary_windows(["人工智能是计算机科学的一个分支。", "北京大学"], max_gaps=5)
        >>> len(windows), sum(len(w.labels) for w in windows)   # the first text already gives 14 gaps
        (1, 14)
    """
    texts = as_list(texts, "texts", '["人工智能是计算机科学的一个分支。"]')
    if max_gaps is not None and (isinstance(max_gaps, bool) or not isinstance(max_gaps, (int, np.integer))
                                 or max_gaps < 1):
        raise InputError(f"max_gaps must be a positive int or None (no limit); got {max_gaps!r}")
    segment = segment or jieba_words
    windows: list[GapWindow] = []
    n_gaps = 0
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{index}] is {type(text).__name__}, not str; pass a list of texts")
        if text:
            windows += cjk_gap_windows(text, segment(text), max_bytes, text_index=index)
            n_gaps = sum(len(window.labels) for window in windows)
        if max_gaps is not None and n_gaps >= max_gaps:
            break
    return windows


class WindowAUC(NamedTuple):
    """The pooled ROC-AUC (shape: the increments' leading shape, e.g. (L,)), the number of scored gaps
    and the share of them that are word boundaries (the script prints all three)."""

    auc: np.ndarray
    n_gaps: int
    boundary_rate: float


def window_boundary_auc(window_increments: Sequence[np.ndarray], windows: Sequence[GapWindow]) -> WindowAUC:
    """ROC-AUC of the increments at the scored gaps of :func:`boundary_windows`, pooled over windows, for
    each leading index (e.g. per layer): the post's between-CJK word-boundary AUC against jieba.

    ``window_increments[i]``: (..., n_bytes) increments of window i, from tracing ``windows[i].byte_ids``
    alone (the script prepends nothing); every window must have the same leading shape.

    Example:
        >>> import numpy as np
        >>> windows = boundary_windows(["人工智能是分支"])
        >>> byte_delta = np.ones((2, 21)); byte_delta[1, [12, 15]] = 2.0   # layer 1: larger δ at word starts
        >>> r = window_boundary_auc([byte_delta], windows)
        >>> r.auc.tolist(), r.n_gaps, round(r.boundary_rate, 3)
        ([0.5, 1.0], 6, 0.333)
    """
    increments = as_list(window_increments, "window_increments", "[trace_increments(trace).mean(axis=1), ...]")
    windows = as_list(windows, "windows", "boundary_windows(texts)")
    if len(increments) != len(windows):
        raise InputError(f"{len(increments)} arrays of increments for {len(windows)} windows; "
                         "pass one (..., n_bytes) array per window")
    if not windows:
        raise InputError("windows is empty; the texts held no CJK text to score")
    scores: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for index, (values, window) in enumerate(zip(increments, windows)):
        inc = as_float_array(values, f"window_increments[{index}]", shape_hint="pass (..., n_bytes) per window")
        check_same_length(f"window_increments[{index}]", inc.shape[-1], f"windows[{index}].byte_ids",
                          len(window.byte_ids))
        if scores and inc.shape[:-1] != scores[0].shape[:-1]:
            raise InputError(f"window_increments[{index}] has leading shape {inc.shape[:-1]} but window 0 has "
                             f"{scores[0].shape[:-1]}; trace every window with the same model")
        scores.append(inc[..., window.lead_bytes])
        labels.append(np.asarray(window.labels, dtype=bool))
    pooled = np.concatenate(labels)
    auc = boundary_auc(np.concatenate(scores, axis=-1), pooled)
    return WindowAUC(auc=auc, n_gaps=int(pooled.size), boundary_rate=float(pooled.mean()))
