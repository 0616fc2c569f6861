"""Word-boundary ROC-AUC of position increments (the learned-increments post's Chinese protocol)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
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
    spans = _spans(token_char_spans, len(text))
    ends = np.cumsum([len(w) for w in words if w]) - 1
    word_end = np.zeros(len(text), dtype=bool)
    word_end[ends] = True
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
