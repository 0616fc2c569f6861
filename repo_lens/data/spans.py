"""Character spans -> token spans through a tokenizer's offsets, and the ``Prompt`` record.

A token belongs to a character span when its character offsets overlap the span; special
tokens (offset (0, 0), no text) belong to none. Tokenizers supported (duck-typed, so this
module needs neither torch nor transformers): HF fast tokenizers (``tokenizer(text,
return_offsets_mapping=True)``), raw ``tokenizers.Tokenizer`` objects, and repo_lens'
``ByteTokenizer`` (``.offsets(text)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repo_lens.errors import InputError
from repo_lens.validation import utf8_bytes

Span = tuple[int, int]


def encode_with_offsets(tokenizer: Any, text: str, add_special_tokens: bool = True) -> tuple[list[int], list[Span]]:
    """Token ids and per-token (start, end) character offsets of ``text``.

    Special tokens (BOS/EOS/...) get offset (0, 0) so that they belong to no span.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> encode_with_offsets(ByteTokenizer(), "hé")
        ([104, 195, 169], [(0, 1), (1, 2), (1, 2)])
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}")
    utf8_bytes(text)  # a lone surrogate: an InputError naming it, not the tokenizer's own exception
    if hasattr(tokenizer, "offsets") and callable(tokenizer.offsets):  # ByteTokenizer
        return [int(i) for i in tokenizer.encode(text)], [(int(a), int(b)) for a, b in tokenizer.offsets(text)]
    if getattr(tokenizer, "is_fast", None) is False:
        raise InputError(
            f"{type(tokenizer).__name__} is a slow tokenizer without character offsets; "
            "load the fast one (AutoTokenizer.from_pretrained(..., use_fast=True))"
        )
    if callable(tokenizer) and hasattr(tokenizer, "is_fast"):  # transformers PreTrainedTokenizerFast
        encoded = tokenizer(
            text,
            return_offsets_mapping=True,
            add_special_tokens=add_special_tokens,
            return_special_tokens_mask=True,
        )
        ids = [int(i) for i in encoded["input_ids"]]
        offsets = [(int(a), int(b)) for a, b in encoded["offset_mapping"]]
        special = encoded.get("special_tokens_mask") or [0] * len(ids)
    elif hasattr(tokenizer, "encode") and hasattr(tokenizer, "token_to_id"):  # tokenizers.Tokenizer
        encoding = tokenizer.encode(text, add_special_tokens=add_special_tokens)
        ids = [int(i) for i in encoding.ids]
        offsets = [(int(a), int(b)) for a, b in encoding.offsets]
        special = list(encoding.special_tokens_mask)
    else:
        raise InputError(
            f"cannot get character offsets from a {type(tokenizer).__name__}; pass an HF fast tokenizer, "
            "a tokenizers.Tokenizer or repo_lens' ByteTokenizer"
        )
    offsets = [(0, 0) if flag else pair for pair, flag in zip(offsets, special)]
    return ids, offsets


def char_to_token_span(offsets: Sequence[Span], char_start: int, char_end: int) -> Span:
    """(tok_start, tok_end), end exclusive, of the tokens whose characters overlap [char_start, char_end).

    Example:
        >>> char_to_token_span([(0, 0), (0, 3), (3, 4), (4, 9)], 3, 6)
        (2, 4)
    """
    table = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    return _token_span(table, char_start, char_end)


def _token_span(table: np.ndarray, char_start: int, char_end: int) -> Span:
    if not 0 <= char_start < char_end:
        raise InputError(f"character span ({char_start}, {char_end}) must satisfy 0 <= start < end")
    starts, ends = table[:, 0], table[:, 1]
    hits = np.flatnonzero((starts < char_end) & (ends > char_start) & (ends > starts))
    if hits.size == 0:
        raise InputError(
            f"character span ({char_start}, {char_end}) covers no token; check that it lies inside the "
            "encoded text (special tokens belong to no span)"
        )
    return int(hits[0]), int(hits[-1]) + 1


@dataclass
class Prompt:
    """A tokenized prompt with named token spans.

    ``spans``: name -> (start, end) token span, end exclusive (some may nest, e.g. a needle and
    its value; :meth:`pick` the disjoint ones you want to measure). ``char_spans``: the same
    names in characters of ``text``. ``query``: the query rows for attention mass (the answer
    tokens when the answer is appended, else the last tokens). ``answer``: the expected answer.
    """

    text: str
    ids: np.ndarray
    spans: dict[str, Span]
    char_spans: dict[str, Span]
    query: Span
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)

    def pick(self, *names: str) -> dict[str, Span]:
        """The token spans ``names`` as a dict (for attention_mass)."""
        unknown = [name for name in names if name not in self.spans]
        if unknown:
            raise InputError(f"unknown span names {unknown}; this prompt has {sorted(self.spans)}")
        return {name: self.spans[name] for name in names}

    def span_text(self, name: str) -> str:
        """The characters of span ``name``."""
        start, end = self.char_spans[name]
        return self.text[start:end]

    def __len__(self) -> int:
        return int(self.ids.size)


@dataclass(frozen=True, kw_only=True)
class PromptEncoding:
    """How a prompt builder ends and tokenizes its prompt (``niah_prompt``, ``fewshot_prompt``, ``table_prompt``):
    with ``append_answer`` (and an answer) the answer is appended and its tokens are the query rows, otherwise
    the last ``last_k`` tokens are; ``add_special_tokens``: the tokenizer's special tokens (a BOS) around the text.

    Example:
        >>> from repo_lens.data.fewshot import fewshot_prompt
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> p = fewshot_prompt(ByteTokenizer(), [("a", "b")], "c", "d", encoding=PromptEncoding(append_answer=False))
        >>> p.text.endswith("Output:"), p.query
        (True, (35, 36))
    """

    append_answer: bool = True
    last_k: int = 1
    add_special_tokens: bool = True


class PromptBuilder:
    """Builds a text piece by piece, recording named character spans, then tokenizes it.

    A name given to several pieces spans from the first piece's start to the last one's end.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> b = PromptBuilder()
        >>> b.add("Q: ", "question"); b.add("why?", "question", "ask"); b.add(" A:")
        >>> p = b.build(ByteTokenizer(), answer="yes")
        >>> p.spans["ask"], p.query, p.text
        ((3, 7), (11, 14), 'Q: why? A: yes')
    """

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.char_spans: dict[str, Span] = {}

    def add(self, text: str, *names: str) -> None:
        start, end = self.length, self.length + len(text)
        self.parts.append(text)
        self.length = end
        for name in names:
            if end == start:
                continue
            old = self.char_spans.get(name)
            self.char_spans[name] = (start, end) if old is None else (min(old[0], start), max(old[1], end))

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def build(
        self,
        tokenizer: Any,
        answer: str = "",
        *,
        append_answer: bool = True,
        answer_separator: str = " ",
        last_k: int = 1,
        trim_from: str | None = None,
        meta: dict[str, Any] | None = None,
        add_special_tokens: bool = True,
    ) -> Prompt:
        """Tokenize into a :class:`Prompt`.

        With ``append_answer`` (and an answer), ``answer_separator + answer`` is appended and
        the answer's tokens are the query rows (span ``"answer"``). Otherwise the query rows
        are the last ``last_k`` text tokens, cut from the span ``trim_from`` so that spans stay
        disjoint from the rows.
        """
        char_spans = dict(self.char_spans)
        text = self.text
        appended = append_answer and bool(answer)
        if appended:
            start = len(text) + len(answer_separator)
            text = text + answer_separator + answer
            char_spans["answer"] = (start, len(text))
        ids, offsets = encode_with_offsets(tokenizer, text, add_special_tokens=add_special_tokens)
        if not ids:
            raise InputError("the prompt encodes to no tokens; give it some text")
        table = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        spans = {name: _token_span(table, a, b) for name, (a, b) in char_spans.items()}
        if appended:
            query = spans["answer"]
            _check_apart_from_answer(spans, query)
        else:
            query = _last_rows(offsets, last_k)
            if trim_from is not None and trim_from in spans:
                _trim_before(query, trim_from, spans, char_spans, offsets, last_k)
        return Prompt(
            text=text,
            ids=np.asarray(ids, dtype=np.int64),
            spans=spans,
            char_spans=char_spans,
            query=query,
            answer=answer,
            meta=dict(meta or {}),
        )


def _check_apart_from_answer(spans: dict[str, Span], query: Span) -> None:
    """No span but the answer's may share a token with the answer ``query``."""
    for name, (start, end) in spans.items():
        if name != "answer" and start < query[1] and query[0] < end:
            raise InputError(
                f"span {name!r} shares tokens with the answer {query}: the tokenizer merges them; "
                "separate the answer from the prompt (answer_separator)"
            )


def _last_rows(offsets: Sequence[Span], last_k: int) -> Span:
    """The token span of the last ``last_k`` tokens that cover text (special tokens at the end aside)."""
    text_end = max(index for index, (a, b) in enumerate(offsets) if b > a) + 1
    if not 1 <= last_k < text_end:
        raise InputError(f"last_k={last_k} must be in 1..{text_end - 1} for a {text_end}-token prompt")
    return (text_end - last_k, text_end)


def _trim_before(query: Span, name: str, spans: dict[str, Span], char_spans: dict[str, Span],
                 offsets: Sequence[Span], last_k: int) -> None:
    """Cut span ``name`` (tokens and characters, in place) so that it ends where ``query`` starts."""
    start, end = spans[name]
    if end <= query[0]:
        return
    if query[0] <= start:
        raise InputError(f"last_k={last_k} swallows the whole span {name!r}; use a smaller last_k")
    spans[name] = (start, query[0])
    char_start = char_spans[name][0]
    char_spans[name] = (char_start, max(char_start + 1, offsets[query[0] - 1][1]))
