"""Documents cut into windows of at most the model's context, never truncated.

A document is tokenized once (without special tokens), then cut into windows of ``size`` tokens
whose starts are ``stride`` tokens apart (``stride < size``: consecutive windows overlap by
``size - stride`` tokens); the last window ends at the document's end, so every token is in a
window. A window never ends inside a character (a byte model's multi-byte UTF-8 character, or a
character a byte-level BPE splits over tokens): its end moves back to the character's first token.
Each window's model input is the tokenizer's leading special tokens (a BOS) and its tokens.

Example:
    >>> from repo_lens.data.corpus_sources import Document
    >>> class Bytes:  # a byte-level tokenizer, as repo_lens' ByteTokenizer
    ...     name = "bytes"
    ...     def encode(self, text): return list(text.encode("utf-8"))
    >>> windows = document_windows(Bytes(), Document(0, "d0", "héllo wörld"), size=5, stride=5)
    >>> [(w.token_start, w.token_end, w.char_start, w.char_end) for w in windows]
    [(0, 5, 0, 4), (5, 10, 4, 8), (10, 13, 8, 11)]
    >>> windows[0].columns()
    {'document': 0, 'document_id': 'd0', 'window': 0, 'token_start': 0, 'token_end': 5, 'char_start': 0, 'char_end': 4}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from repo_lens.data.corpus_sources import Document
from repo_lens.data.spans import encode_with_offsets
from repo_lens.errors import InputError
from repo_lens.validation import check_int, utf8_bytes

WINDOW_COLUMNS = ("document", "document_id", "window", "token_start", "token_end", "char_start", "char_end")


@dataclass(frozen=True)
class Tokenized:
    """A document's tokens: ``ids`` (T,), character ``offsets`` (T, 2) and ``breakable`` (T,): whether a
    window may start at that token (it begins a character)."""

    ids: np.ndarray
    offsets: np.ndarray
    breakable: np.ndarray


@dataclass(frozen=True)
class Window:
    """A window of a document: tokens ``token_start:token_end`` of it (characters ``char_start:char_end``),
    the ``ids`` the model reads (``prefix`` special tokens first) and the tokens' character ``offsets``
    in the document (``token_end - token_start`` rows)."""

    document: Document
    window: int
    token_start: int
    token_end: int
    char_start: int
    char_end: int
    ids: list[int]
    prefix: int
    offsets: np.ndarray

    def columns(self) -> dict[str, Any]:
        """Where the window sits: the first columns of every record of a corpus study."""
        return {"document": self.document.index, "document_id": self.document.id, "window": self.window,
                "token_start": self.token_start, "token_end": self.token_end,
                "char_start": self.char_start, "char_end": self.char_end}

    @property
    def text(self) -> str:
        """The window's characters of the document."""
        return (self.document.text or "")[self.char_start:self.char_end]


@dataclass(frozen=True)
class WindowSpec:
    """How documents are cut: ``size`` tokens per window (default: the model's context less its
    leading special tokens), starts ``stride`` tokens apart (default: ``size``, no overlap) or,
    instead of a stride, ``overlap`` tokens shared by consecutive windows. ``beyond_context`` lets a
    window be longer than the model's context (extrapolation).

    Example:
        >>> WindowSpec(overlap=256).resolve(context=1024, prefix=1)
        (1023, 767)
        >>> WindowSpec(size=512, stride=600).resolve(context=1024, prefix=0)
        Traceback (most recent call last):
        repo_lens.errors.InputError: --stride 600 is longer than the window of 512 tokens, so tokens between windows would be skipped; use a stride of 1..512 (512: windows side by side, less: overlapping)
    """

    size: int | None = None
    stride: int | None = None
    overlap: int | None = None
    beyond_context: bool = False

    def resolve(self, context: int | None, prefix: int) -> tuple[int, int]:
        """(window size, stride) in document tokens for a model of ``context`` tokens that puts ``prefix``
        special tokens before each window; an InputError naming the fix for impossible settings."""
        room = context - prefix if context else None
        size = self.size if self.size is not None else room
        if size is None:
            raise InputError("the model does not say its context length; pass --window N (window_size=N) tokens")
        size = check_int(size, "--window (tokens per window)", minimum=1)
        if room is not None and size > room and not self.beyond_context:
            raise InputError(f"--window {size} is longer than the model's context of {context} tokens"
                             + (f" ({prefix} taken by special tokens)" if prefix else "")
                             + f"; use --window {room} or less, or pass --beyond-context to trace longer windows "
                               "(extrapolation)")
        if self.stride is not None and self.overlap is not None:
            raise InputError("give either --stride (tokens between window starts) or --overlap (tokens shared by "
                             "consecutive windows), not both")
        if self.overlap is not None:
            overlap = check_int(self.overlap, "--overlap (tokens shared by consecutive windows)", minimum=0)
            if overlap >= size:
                raise InputError(f"--overlap {overlap} leaves no new tokens in a window of {size}; "
                                 f"use an overlap of 0..{size - 1}")
            return size, size - overlap
        stride = check_int(self.stride if self.stride is not None else size, "--stride (tokens between window "
                           "starts)", minimum=1)
        if stride > size:
            raise InputError(f"--stride {stride} is longer than the window of {size} tokens, so tokens between "
                             f"windows would be skipped; use a stride of 1..{size} ({size}: windows side by side, "
                             "less: overlapping)")
        return size, stride


def tokenize_document(tokenizer: Any, text: str) -> Tokenized:
    """``text``'s tokens without special tokens, their character offsets and where windows may break.

    A byte-level tokenizer (``name == "bytes"``, repo_lens' ByteTokenizer) is handled with numpy;
    others go through :func:`repo_lens.data.spans.encode_with_offsets` (HF fast tokenizers).

    Example:
        >>> class Bytes:
        ...     name = "bytes"
        >>> t = tokenize_document(Bytes(), "hé")
        >>> t.ids.tolist(), t.offsets.tolist(), t.breakable.tolist()
        ([104, 195, 169], [[0, 1], [1, 2], [1, 2]], [True, True, False])
    """
    if getattr(tokenizer, "name", None) == "bytes":
        codes = np.frombuffer(utf8_bytes(text, "the document"), dtype=np.uint8)
        lead = (codes & 0xC0) != 0x80  # continuation bytes are 10xxxxxx
        chars = np.cumsum(lead) - 1
        return Tokenized(codes.astype(np.int64), np.stack([chars, chars + 1], axis=1), lead)
    ids, offsets = encode_with_offsets(tokenizer, text, add_special_tokens=False)
    spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    breakable: np.ndarray = np.ones(len(ids), dtype=bool)
    breakable[1:] = spans[1:, 0] >= spans[:-1, 1]  # a token that starts inside the previous one's character
    return Tokenized(np.asarray(ids, dtype=np.int64), spans, breakable)


def special_prefix(tokenizer: Any) -> list[int]:
    """The special tokens the tokenizer puts before a text (a BOS), which each window starts with.

    >>> class Bytes:
    ...     name = "bytes"
    >>> special_prefix(Bytes())
    []
    """
    if tokenizer is None or getattr(tokenizer, "name", None) == "bytes":
        return []
    ids, offsets = encode_with_offsets(tokenizer, "a", add_special_tokens=True)
    count = next((index for index, span in enumerate(offsets) if tuple(span) != (0, 0)), len(ids))
    return [int(one) for one in ids[:count]]


def window_bounds(n_tokens: int, size: int, stride: int, breakable: np.ndarray | None = None) -> list[tuple[int, int]]:
    """(start, end) of the windows of a document of ``n_tokens`` tokens: ``size`` long, ``stride`` apart,
    the last one ending at the document's end; an end or start falls back to the nearest ``breakable``
    token (where a character begins) within the window.

    Example:
        >>> window_bounds(10, 4, 4), window_bounds(10, 4, 3), window_bounds(3, 4, 4), window_bounds(0, 4, 4)
        ([(0, 4), (4, 8), (8, 10)], [(0, 4), (3, 7), (6, 10)], [(0, 3)], [])
        >>> window_bounds(6, 4, 4, breakable=np.array([1, 1, 1, 1, 0, 1], dtype=bool))  # token 4 continues a character
        [(0, 3), (3, 6)]
    """
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n_tokens:
        end = min(start + size, n_tokens)
        if end < n_tokens:
            end = _back_to_break(breakable, end, start)
        bounds.append((start, end))
        if end >= n_tokens:
            break
        start = end if stride >= size else min(_back_to_break(breakable, start + stride, start), end)
    return bounds


def _back_to_break(breakable: np.ndarray | None, position: int, floor: int) -> int:
    """``position``, or the nearest breakable token before it and after ``floor`` (else ``position`` itself)."""
    if breakable is None or breakable[position]:
        return position
    for candidate in range(position - 1, floor, -1):
        if breakable[candidate]:
            return candidate
    return position


def document_windows(tokenizer: Any, document: Document, size: int, stride: int,
                     prefix: list[int] | None = None) -> list[Window]:
    """The windows of ``document`` (see :func:`window_bounds`); ``prefix`` special tokens start each one."""
    if not document.text:
        return []
    tokens = tokenize_document(tokenizer, document.text)
    prefix = list(prefix or [])
    windows = []
    for number, (start, end) in enumerate(window_bounds(len(tokens.ids), size, stride, tokens.breakable)):
        offsets = tokens.offsets[start:end]
        windows.append(Window(document, number, start, end, int(offsets[0, 0]), int(offsets[:, 1].max()),
                              prefix + tokens.ids[start:end].tolist(), len(prefix), offsets))
    return windows
