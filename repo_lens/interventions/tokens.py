"""``tokens=``: which tokens' positions an intervention edits or patches.

A selection is a slice, a list of token indices, the name of a span of a built prompt (``"needle"``,
``"question"``, ``"value"``...; see :class:`repo_lens.data.spans.Prompt`), several names, ``"~name"``
for every token outside a span, or ``"rest"``: every token outside the needles, the question (or
query) and the answer. Named spans are read from each prompt of a batch, so prompts with the needle
at different places each get their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from repo_lens.errors import InputError

REST = "rest"
_REST_EXCLUDES = ("question", "query", "answer")
_HELP = ('tokens is None (every token), a slice, a list of token indices, a span name of a built prompt '
         '(e.g. "needle", "question"), a list of span names, "~name" (every token outside a span), or "rest" '
         '(every token outside the needles, the question and the answer)')


def _span_mask(prompt: Any, name: str, length: int) -> np.ndarray:
    mask = np.zeros(length, dtype=bool)
    if name == REST:
        names = [key for key in prompt.spans if key.startswith("needle") or key in _REST_EXCLUDES]
        if not names:
            raise InputError(f'tokens="rest" needs a prompt with a needle, question or answer span; this one has '
                             f"{sorted(prompt.spans)}")
        for key in names:
            start, end = prompt.spans[key]
            mask[start:end] = True
        return ~mask
    negate = name.startswith("~")
    key = name[1:] if negate else name
    if key not in prompt.spans:
        raise InputError(f"tokens={name!r}: the prompt has no span {key!r}; its spans are {sorted(prompt.spans)}")
    start, end = prompt.spans[key]
    mask[start:end] = True
    return ~mask if negate else mask


def _row_mask(tokens: Any, prompt: Any, length: int, width: int) -> np.ndarray:
    if isinstance(tokens, slice):
        mask = np.zeros(width, dtype=bool)
        mask[:length][tokens] = True
        return mask
    names = [tokens] if isinstance(tokens, str) else None
    if names is None and isinstance(tokens, Sequence) and tokens and all(isinstance(item, str) for item in tokens):
        names = list(tokens)
    mask = np.zeros(width, dtype=bool)
    if names is not None:
        if prompt is None:
            raise InputError(f"tokens={tokens!r} names a span of a built prompt, but this input is plain text or ids; "
                             "pass Prompts (e.g. from niah_prompt) or token indices")
        for name in names:
            mask[:length] |= _span_mask(prompt, name, length)
        return mask
    try:
        indices = np.asarray(tokens)
    except (TypeError, ValueError):
        indices = None
    if indices is None or indices.ndim != 1 or indices.size == 0 or indices.dtype.kind not in "iu":
        raise InputError(f"tokens={tokens!r:.60}: {_HELP}")
    if indices.min() < -length or indices.max() >= length:
        raise InputError(f"tokens {indices.tolist()!r:.60} are out of range for a prompt of {length} tokens; "
                         f"use indices in 0..{length - 1}")
    mask[indices % length] = True
    return mask


def token_mask(tokens: Any, prompts: list, lengths: list[int], width: int) -> torch.Tensor | None:
    """Boolean [batch, width]: the selected tokens of each row (None when ``tokens`` is None: every token).

    >>> token_mask(slice(1, 3), [None], [4], 4).int().tolist()
    [[0, 1, 1, 0]]
    >>> from repo_lens.data.spans import PromptBuilder
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> b = PromptBuilder(); b.add("ab", "needle"); b.add("cd"); b.add("e?", "question")
    >>> prompt = b.build(ByteTokenizer(), answer="f", answer_separator="", add_special_tokens=False)
    >>> token_mask("rest", [prompt], [len(prompt)], len(prompt)).int().tolist()
    [[0, 0, 1, 1, 0, 0, 0]]
    """
    if tokens is None:
        return None
    rows = [_row_mask(tokens, prompt, length, width) for prompt, length in zip(prompts, lengths)]
    mask = torch.as_tensor(np.stack(rows))
    if not mask.any():
        raise InputError(f"tokens={tokens!r:.60} selects no token; {_HELP}")
    return mask
