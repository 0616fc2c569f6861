"""What the learned positions encode: each head's variance over the tokens of a text, split into the share
the token index explains, the share a token's content class explains beyond that, the share a named span
(e.g. the needle) explains beyond both, and what is left.

The split is the sequential R² of nested least-squares fits (Type I sums of squares), in this order:

1. **index**: per text, the head's own line z ≈ a·t + b in the token index t. Its share is that line's
   R²: 1 for RoPE's positions, ≈ 0 for positions with no trend along the text.
2. **content**: the line and one offset per content class (pooled over the texts), fitted together.
   Its share is what that fit adds to the line's R².
3. **span** (optional): the same with one more offset for the tokens of a span, e.g. the needle. Its share
   is what that offset adds beyond the line and the classes.
4. **rest**: 1 − the R² of the full fit. This is the token-by-token variation that none of the above
   describes.

Each step can only add to the R², so the shares are non-negative and sum to 1. Positions that are a
function of the class alone have index + content = 1. Positions that are a line have index = 1. The
variance is taken within each text and pooled over the texts: each text's mean is removed first, because
RoPE rotates by differences of positions, so shifting all of a text's positions changes nothing.

The order is a choice. The index goes first, so its share is exactly the head's own-line R², and what a
class and the index both explain (a class that sits more at some indices than at others) is credited to
the index. A step with k groups fits k − 1 numbers, so noise alone earns it about (k − 1) / N of N tokens.
That is small with a handful of classes, but not with one class per token id on a short text.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from repo_lens.analysis._checks import as_list, as_positions
from repo_lens.errors import InputError

CONTENT_CLASSES: tuple[str, ...] = ("digit", "punctuation", "space", "word start", "other")
# How tokenizers display whitespace: byte tokens (␣ space, ↵ newline, ⇥ tab), byte-level BPE (Ġ, Ċ, ĉ),
# SentencePiece (▁); "·" is the byte display's continuation byte of a multi-byte character.
_SPACE_MARKERS = {"␣": " ", "↵": "\n", "⇥": "\t", "Ġ": " ", "Ċ": "\n", "ĉ": "\t", "▁": " "}
_CONTINUATION = "·"


def _token_class(text: str, after_word: bool) -> str:
    text = "".join(_SPACE_MARKERS.get(char, char) for char in text)
    core = text.strip()
    if not core:
        return "space" if text else "other"
    if all(unicodedata.category(char)[0] == "N" for char in core):
        return "digit"
    if all(unicodedata.category(char)[0] in "PS" or char in string.punctuation for char in core):
        return "punctuation"
    starts_word = unicodedata.category(core[0])[0] == "L" and (text[0].isspace() or not after_word)
    return "word start" if starts_word else "other"


def content_classes(tokens: Sequence[str]) -> np.ndarray:
    """The content class of every token, from its display string (``trace.tokens``), one of
    :data:`CONTENT_CLASSES`: ``digit`` (only digits / numerals, a leading space allowed),
    ``punctuation`` (only punctuation or symbols), ``space`` (only whitespace, shown as ␣ ↵ Ġ Ċ ▁ or
    as itself), ``word start`` (a letter that opens a word: after whitespace, after a non-letter token,
    or first), ``other`` (the rest of a word, a continuation byte, special tokens).

    Works for byte-level models (one character per token) and subword tokenizers alike.

    Example:
        >>> content_classes(["T", "h", "e", "␣", "4", "2", ",", "␣", "é", "·"]).tolist()
        ['word start', 'other', 'other', 'space', 'digit', 'digit', 'punctuation', 'space', 'word start', 'other']
        >>> content_classes(["The", " cat", "s", " 42", ".", "\\n"]).tolist()
        ['word start', 'word start', 'other', 'digit', 'punctuation', 'space']
    """
    tokens = as_list(tokens, "tokens", "trace.tokens (one display string per token)")
    if not tokens:
        raise InputError("tokens is empty; pass at least one token string")
    out, after_word = [], False
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            raise InputError(f"token {index} is {type(token).__name__}, not str; pass display strings "
                             "(trace.tokens), or labels of your own to position_variance_shares")
        if token == _CONTINUATION:  # the rest of the character before: part of the same word
            out.append("other")
            continue
        label = _token_class(token, after_word)
        out.append(label)
        plain = "".join(_SPACE_MARKERS.get(char, char) for char in token)
        after_word = bool(plain) and unicodedata.category(plain[-1])[0] in "LN"
    return np.asarray(out, dtype=f"<U{max(map(len, CONTENT_CLASSES))}")


class _SequentialFit:
    """Least squares of ``y`` (…, N) on blocks of columns added in turn, each text's mean removed from
    every column first; :meth:`add` returns the sum of squares the new block explains beyond the earlier
    ones (columns the earlier blocks already span add nothing)."""

    def __init__(self, y: np.ndarray, bounds: np.ndarray) -> None:
        self.y, self.bounds = y, bounds
        self.bases: list[np.ndarray] = []
        self.parts: list[np.ndarray] = []

    def add(self, columns: np.ndarray) -> np.ndarray:
        x = columns.copy()
        for first, end in zip(self.bounds[:-1], self.bounds[1:]):
            x[first:end] -= x[first:end].mean(axis=0)
        scale = float(np.linalg.norm(x, axis=0).max()) if x.size else 0.0
        for _ in range(2):  # twice: projections in floating point leave a little of the earlier blocks
            for basis in self.bases:
                x -= basis @ (basis.T @ x)
        u, singular, _ = np.linalg.svd(x, full_matrices=False)
        basis = u[:, singular > 1e-9 * max(scale, 1e-300)]
        coefficients = self.y @ basis
        self.bases.append(basis)
        self.parts.append(coefficients @ basis.T)
        return (coefficients * coefficients).sum(axis=-1)

    def fitted(self, upto: int | None = None) -> np.ndarray:
        """The fit of the first ``upto`` blocks (None: all so far)."""
        return sum(self.parts[:upto], np.zeros_like(self.y))


@dataclass(frozen=True)
class VarianceShares:
    """The shares of each head's variance (all (L, H), float64, NaN where a head's positions do not vary):
    ``index``, ``content``, ``span`` (None when no span was given) and ``rest``, summing to 1;
    ``variance``: the within-text variance per token that is split; ``class_means`` (L, H, C): the mean
    of what the lines leave on each class of ``classes``; ``span_offset`` (L, H): the mean of what is left
    after the classes on the span's tokens minus its mean on the others (None without a span)."""

    index: np.ndarray
    content: np.ndarray
    span: np.ndarray | None
    rest: np.ndarray
    variance: np.ndarray
    classes: tuple[Any, ...]
    class_means: np.ndarray
    span_offset: np.ndarray | None
    span_name: str | None
    n_tokens: int
    n_texts: int

    def shares(self) -> dict[str, np.ndarray]:
        """{name: (L, H) share} in the order index, content, span (when given), rest."""
        out = {"index": self.index, "content": self.content}
        if self.span is not None:
            out["span"] = self.span
        out["rest"] = self.rest
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One dict per layer and head: layer, head, each share, and the variance (for a table or CSV)."""
        shares = self.shares()
        return [{"layer": layer, "head": head, **{name: float(value[layer, head]) for name, value in shares.items()},
                 "variance": float(self.variance[layer, head])}
                for layer in range(self.index.shape[0]) for head in range(self.index.shape[1])]


def _one_text(value: Any, rank: int) -> bool:
    """Whether ``value`` is one text's array (of ``rank``) rather than a list of them, one per text."""
    if isinstance(value, np.ndarray):
        return value.dtype != object
    if isinstance(value, (list, tuple)) and value and not isinstance(value[0], np.ndarray):
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):  # ragged: one array per text
            return False
        return array.ndim == rank and array.dtype != object
    return False


def _as_texts(value: Any, name: str, rank: int) -> list:
    if _one_text(value, rank):
        return [value]
    return as_list(value, name, f"one {name} array per text")


def _span_mask(span: Any, n_tokens: int, text: int) -> np.ndarray:
    if span is None:
        return np.zeros(n_tokens, dtype=bool)
    mask = np.asarray(span)
    if mask.dtype == bool:
        if mask.shape != (n_tokens,):
            raise InputError(f"span mask of text {text} has shape {mask.shape}; pass one bool per token ({n_tokens})")
        return mask
    if mask.shape != (2,) or mask.dtype.kind not in "iu":
        raise InputError(f"span of text {text} must be (start, end) token indices (end exclusive), a bool mask, "
                         f"or None; got {span!r:.60}")
    start, end = int(mask[0]), int(mask[1])
    if not 0 <= start <= end <= n_tokens:
        raise InputError(f"span ({start}, {end}) of text {text} is outside its {n_tokens} tokens")
    out = np.zeros(n_tokens, dtype=bool)
    out[start:end] = True
    return out


def _spans_per_text(spans: Any, n_texts: int) -> list:
    if spans is None:
        return [None] * n_texts
    single = (isinstance(spans, np.ndarray) and spans.ndim == 1) or (
        isinstance(spans, (tuple, list)) and len(spans) == 2 and all(isinstance(v, (int, np.integer)) for v in spans))
    if single and n_texts == 1:
        return [spans]
    if single:
        raise InputError(f"one span for {n_texts} texts; pass a list of spans, one per text (None: no span)")
    spans = as_list(spans, "spans", "one (start, end) per text")
    if len(spans) != n_texts:
        raise InputError(f"spans has {len(spans)} entries for {n_texts} texts; pass one per text (None: no span)")
    return spans


def _index_columns(bounds: np.ndarray) -> np.ndarray:
    """[tokens, texts]: the token index within text k in column k, 0 elsewhere (one line per text)."""
    columns = np.zeros((bounds[-1], len(bounds) - 1))
    for number, (first, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        columns[first:end, number] = np.arange(end - first)
    return columns


def _share(part: np.ndarray, total: np.ndarray) -> np.ndarray:
    """part / total in [0, 1]; NaN where the head's positions do not vary."""
    varies = total > 0
    return np.where(varies, np.clip(part / np.where(varies, total, 1.0), 0.0, 1.0), np.nan)


def _checked_texts(positions: Any, classes: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(positions (L, H, T_i), labels (T_i,)) per text, checked to come from one model and to match."""
    texts = [as_positions(z) for z in _as_texts(positions, "positions", 3)]
    labels = [np.asarray(c) for c in _as_texts(classes, "classes", 1)]
    if len(labels) != len(texts):
        raise InputError(f"classes has {len(labels)} texts but positions {len(texts)}; pass one label array per text")
    lead = texts[0].shape[:2]
    for number, (z, c) in enumerate(zip(texts, labels)):
        if z.shape[:2] != lead:
            raise InputError(f"positions of text {number} have {z.shape[:2]} layers × heads, text 0 {lead}; "
                             "pass texts traced by the same model")
        if c.ndim != 1 or c.shape[0] != z.shape[-1]:
            raise InputError(f"classes of text {number} has shape {c.shape}; pass one label per token "
                             f"({z.shape[-1]}), e.g. content_classes(trace.tokens)")
    return texts, labels


def position_variance_shares(positions: Any, classes: Any, spans: Any = None,
                             span_name: str = "span") -> VarianceShares:
    """Split each head's variance of ``positions`` over the tokens into index, content class, span and
    rest (see the module docstring for the decomposition and its order).

    ``positions``: (L, H, T) (``trace.positions``), or a list of them, one per text (T may differ);
    ``classes``: one label per token (T,), e.g. :func:`content_classes` of ``trace.tokens`` or the token
    ids themselves for token identity, or a list of them, one per text; ``spans``: optional (start, end)
    token span (end exclusive) or bool mask per text, e.g. ``trace.spans["needle"]`` (None: no span step);
    ``span_name``: what the span is called in tables and figures.

    Example:
        >>> import numpy as np
        >>> classes = list("abbaabba")  # a class pattern with no trend along the text
        >>> line, tags = 2 * np.arange(8.0) + 1, np.where(np.array(classes) == "a", 3.0, 0.0)
        >>> z = np.stack([line, tags])[None]  # 1 layer: head 0 follows the index, head 1 the class
        >>> r = position_variance_shares(z, classes)
        >>> r.index.round(3).tolist(), r.content.round(3).tolist(), r.rest.round(3).tolist()
        ([[1.0, 0.0]], [[0.0, 1.0]], [[0.0, 0.0]])
        >>> needle = np.where(np.arange(8) == 5, 4.0, 0.0)[None, None]  # one token stands out
        >>> r = position_variance_shares(needle, ["a"] * 8, spans=(5, 6), span_name="needle")
        >>> r.index.round(2).tolist(), r.span.round(2).tolist(), r.rest.round(2).tolist()
        ([[0.06]], [[0.94]], [[0.0]])
    """
    texts, labels = _checked_texts(positions, classes)
    lead = texts[0].shape[:2]
    masks = [_span_mask(span, z.shape[-1], number)
             for number, (z, span) in enumerate(zip(texts, _spans_per_text(spans, len(texts))))]
    label = np.concatenate(labels)
    try:
        names, codes = np.unique(label, return_inverse=True)
    except TypeError as error:
        raise InputError(f"classes must be labels of one kind (all str or all int): {error}") from None
    bounds = np.cumsum([0] + [z.shape[-1] for z in texts])
    y = np.concatenate([z - z.mean(axis=-1, keepdims=True) for z in texts], axis=-1)  # within each text
    total = (y * y).sum(axis=-1)
    fit = _SequentialFit(y, bounds)
    explained = fit.add(_index_columns(bounds))  # each text's own line
    after_line = y - fit.fitted()
    dummies = np.zeros((bounds[-1], len(names)))
    dummies[np.arange(bounds[-1]), codes] = 1.0
    counts = dummies.sum(axis=0)
    class_means = after_line @ dummies / counts
    content = fit.add(dummies)
    span_share, span_offset, span_ss = None, None, np.zeros(lead)
    if spans is not None:
        mask = np.concatenate(masks)
        span_ss = fit.add(mask[:, None].astype(np.float64))
        left = y - fit.fitted(upto=2)
        inside, outside = left[..., mask], left[..., ~mask]
        span_offset = ((inside.mean(axis=-1) if inside.shape[-1] else 0.0)
                       - (outside.mean(axis=-1) if outside.shape[-1] else 0.0)) * np.ones(lead)
    index_share, content_share, n_tokens = _share(explained, total), _share(content, total), int(label.shape[0])
    if spans is not None:
        span_share = _share(span_ss, total)
    rest = _share(total - explained - content - span_ss, total)
    return VarianceShares(index=index_share, content=content_share, span=span_share, rest=rest,
                          variance=total / n_tokens, classes=tuple(names.tolist()), class_means=class_means,
                          span_offset=span_offset, span_name=span_name if spans is not None else None,
                          n_tokens=n_tokens, n_texts=len(texts))
