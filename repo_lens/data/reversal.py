"""RePo App. C's text-reversal task: ``<bos> Reverse the following words : x1 … xL <sep> xL … x1 <eos>``.

The one home of the task's format: the training task (``repo_lens.train.tasks.ReversalTask``)
builds its token sequences with :func:`reversal_sequence`, and :func:`reversal_prompt` writes the
same prompt as text for any tokenizer, so a traced prompt looks like a training example.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from repo_lens.data.spans import Prompt, PromptBuilder
from repo_lens.errors import InputError

REVERSAL_PROMPT: tuple[str, ...] = ("Reverse", "the", "following", "words", ":")
REVERSAL_SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<sep>", "<eos>")
MAX_REVERSAL_WORDS = 64


def reversal_words(count: int = 120, seed: int = 1234) -> list[str]:
    """A fixed, sorted set of made-up subword-like items (Kazemnejad et al.'s data is not available offline).

    Example:
        >>> words = reversal_words()
        >>> len(words), words == sorted(words), words[:3]
        (120, True, ['ba', 'banu', 'bepu'])
    """
    rng = random.Random(seed)
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 2))))
    return sorted(words)


def reversal_sequence(items: Sequence[str]) -> tuple[list[str], int]:
    """The tokens of one training example for ``items`` and the index of its first output token.

    Example:
        >>> reversal_sequence(["ba", "ko"])
        (['<bos>', 'Reverse', 'the', 'following', 'words', ':', 'ba', 'ko', '<sep>', 'ko', 'ba', '<eos>'], 9)
    """
    prefix = ["<bos>", *REVERSAL_PROMPT, *items, "<sep>"]
    return prefix + list(reversed(items)) + ["<eos>"], len(prefix)


def reversal_prompt(tokenizer: Any, n_words: int, seed: int = 0) -> Prompt:
    """A reversal prompt of ``n_words`` items, answer included, with spans ``input`` (the items)
    and ``output`` (reversed); the query row is the last token.

    For a reversal-task tokenizer (one whose vocabulary has ``<sep>``) the text is the training
    format without ``<eos>``, items drawn from the tokenizer's own words, and the tokenizer adds no
    second ``<bos>``; any other tokenizer gets plain text ("Reverse the following words: …" and a
    newline) with items from :func:`reversal_words`. Items are drawn with ``seed``.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> p = reversal_prompt(ByteTokenizer(), 3)
        >>> p.text
        'Reverse the following words: vado pene mera\\nmera pene vado'
        >>> p.span_text("input"), p.meta["task"]
        ('vado pene mera', 'reversal')
    """
    if isinstance(n_words, bool) or not isinstance(n_words, (int, np.integer)) \
            or not 2 <= n_words <= MAX_REVERSAL_WORDS:
        raise InputError(f"the reversal prompt takes 2..{MAX_REVERSAL_WORDS} words, got {n_words!r}")
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    task_tokenizer = "<sep>" in vocab
    prompt_words = {word.lower() for word in REVERSAL_PROMPT}
    pool = sorted(w for w in vocab if w.isalpha() and w.islower() and w not in prompt_words) if task_tokenizer else []
    pool = pool or reversal_words()
    rng = np.random.default_rng(seed)
    items = [pool[i] for i in rng.integers(0, len(pool), size=int(n_words))]
    builder = PromptBuilder()
    if task_tokenizer:
        builder.add(" ".join(("<bos>", *REVERSAL_PROMPT)) + " ")
    else:
        builder.add(" ".join(REVERSAL_PROMPT[:-1]) + REVERSAL_PROMPT[-1] + " ")
    builder.add(" ".join(items), "input")
    builder.add(" <sep> " if task_tokenizer else "\n")
    builder.add(" ".join(reversed(items)), "output")
    return builder.build(tokenizer, append_answer=False, last_k=1, trim_from="output", meta={"task": "reversal"},
                         add_special_tokens=not task_tokenizer)
