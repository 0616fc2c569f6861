"""Retrieval prompts of several families, for causal studies that should not rest on one template.

Every family hides one fact (a key and a 7-digit value) at a chosen depth of a haystack and asks for
the value at the end; the prompts carry the spans ``needle``, ``key``, ``value``, ``question`` and
``answer`` (the appended value), so an intervention can be restricted to the needle, the question or
the rest (``tokens="rest"``).

- ``needle_noise``: RULER's needle and question in RULER's noise haystack (:func:`niah_prompt`).
- ``needle_text``: RULER's needle and question in running English text (held-out documents of a corpus,
  or any text you pass).
- ``kv_lines``: a list of ``key=value;`` pairs after "Remember:", one of them the asked key's, and the
  question ``key?`` — the format of the associative-recall rows the zoo's 1,024-byte models were trained
  on, with keys and values drawn afresh. (Asked in RULER's words after ``key: value`` lines, a format
  they never saw, ``zoo:bytes1k-repo`` retrieves 0 of 50.)
- ``fact_text``: a fact in other words ("The access code of the {key} is {value}.") in running text,
  asked in the same words.

Depths and haystacks vary with the seed; :func:`moved_pairs` builds patching pairs of equal length
whose needle moves, each pair from its own haystack.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from repo_lens.data.niah import NOISE, _random_key, niah_prompt
from repo_lens.data.spans import Prompt, PromptBuilder, PromptEncoding
from repo_lens.errors import InputError

FAMILIES = ("needle_noise", "needle_text", "kv_lines", "fact_text")
_RULER_INTRO = ("A special magic number is hidden within the following text. Make sure to memorize it. "
                "I will quiz you about the number afterwards.\n")
_RULER_NEEDLE = "One of the special magic numbers for {key} is: {value}."
_RULER_QUESTION = ("\nWhat is the special magic number for {key} mentioned in the provided text?"
                   " The special magic number for {key} mentioned in the provided text is")
_FACT = "The access code of the {key} is {value}."
_FACT_QUESTION = "\nWhat is the access code of the {key}? The access code of the {key} is"


def _value(rng: random.Random) -> str:
    return str(rng.randint(10**6, 10**7 - 1))


def _text_units(text: str) -> list[str]:
    units = [line.strip() for line in text.replace("\n", " ").split(". ") if len(line.strip()) > 3]
    return [unit if unit.endswith((".", "?", "!")) else unit + "." for unit in units]


def _kv_units(rng: random.Random, taken: set[str], count: int) -> list[str]:
    units: list[str] = []
    while len(units) < count:
        key = _random_key(rng, "words")
        if key not in taken:
            taken.add(key)
            units.append(f"{key}={_value(rng)}")
    return units


def _assemble(tokenizer: Any, intro: str, units: list[str], sep: str, needle: str, key: str, value: str,
              question: str, at: int) -> Prompt:
    builder = PromptBuilder()
    builder.add(intro, "instruction")
    for unit in units[:at]:
        builder.add(unit + sep, "context")
    start = needle.index(key)
    builder.add(needle[:start], "context", "needle")
    builder.add(key, "context", "needle", "key")
    between = needle[start + len(key):needle.index(value, start + len(key))]
    builder.add(between, "context", "needle")
    builder.add(value, "context", "needle", "value")
    builder.add(needle[needle.index(value, start + len(key)) + len(value):], "context", "needle")
    builder.add(sep, "context")
    for unit in units[at:]:
        builder.add(unit + sep, "context")
    builder.add(question, "question")
    return builder.build(tokenizer, value, add_special_tokens=False)


def retrieval_prompt(tokenizer: Any, family: str, length: int, *, seed: int, depth: float | None = None,
                     text: str | None = None) -> Prompt:
    """One prompt of ``family`` (see the module docstring) of at most ``length`` tokens, the needle at
    ``depth`` (0 = start of the haystack, 1 = end; None: drawn from ``seed``); ``text``: the running
    text of ``needle_text`` / ``fact_text`` (default: RULER's noise sentences repeated).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> p = retrieval_prompt(ByteTokenizer(), "kv_lines", 400, seed=3)
    >>> len(p) <= 400, p.span_text("value") == p.answer, p.span_text("answer") == p.answer
    (True, True, True)
    """
    if family not in FAMILIES:
        raise InputError(f"unknown prompt family {family!r}; pick one of {FAMILIES}")
    rng = random.Random(f"{family}-{seed}")
    depth = rng.random() if depth is None else depth
    if not 0.0 <= depth <= 1.0:
        raise InputError(f"needle depth {depth!r} must be in [0, 1]")
    if family == "needle_noise":
        prompt = niah_prompt(tokenizer, length, depth=depth, seed=seed,
                             encoding=PromptEncoding(add_special_tokens=False))
        prompt.meta["family"] = family
        return prompt
    key, value = _random_key(rng, "words"), _value(rng)
    if family == "kv_lines":
        pool, sep = _kv_units(rng, {key}, length // 12), "; "
        needle, question, intro = f"{key}={value}", f"\n{key}?", "Remember:\n"
    else:
        source = _text_units(text) if text else [NOISE]
        offset = rng.randrange(len(source))
        pool, sep = [source[(offset + i) % len(source)] for i in range(length // 8)], " "
        template, asked = (_RULER_NEEDLE, _RULER_QUESTION) if family == "needle_text" else (_FACT, _FACT_QUESTION)
        needle, question, intro = template.format(key=key, value=value), asked.format(key=key), \
            (_RULER_INTRO if family == "needle_text" else "Read the text and answer the question.\n")
    return _fit(tokenizer, length, intro, pool, sep, needle, key, value, question, depth, family, seed)


def _fit(tokenizer: Any, length: int, intro: str, pool: list[str], sep: str, needle: str, key: str, value: str,
         question: str, depth: float, family: str, seed: int) -> Prompt:
    """The longest haystack (a prefix of ``pool``) whose prompt fits ``length`` tokens."""
    low, high, best = 0, len(pool), None
    while low <= high:
        middle = (low + high) // 2
        units = pool[:middle]
        prompt = _assemble(tokenizer, intro, units, sep, needle, key, value, question, round(depth * len(units)))
        if len(prompt) <= length:
            best, low = (prompt, middle), middle + 1
        else:
            high = middle - 1
    if best is None:
        raise InputError(f"a {family} prompt needs more than {length} tokens even without a haystack; ask for more")
    prompt, n_units = best
    prompt.meta.update({"family": family, "depth": round(depth * n_units) / max(1, n_units), "seed": seed,
                        "key": key, "haystack_units": n_units})
    return prompt


def retrieval_prompts(tokenizer: Any, length: int, per_family: int, *, families: Sequence[str] = FAMILIES,
                      seed: int = 0, text: str | None = None) -> list[Prompt]:
    """``per_family`` prompts of each family, seeds ``seed``, ``seed + 1``, ... (depths drawn from them).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> [p.meta["family"] for p in retrieval_prompts(ByteTokenizer(), 500, 1, families=("kv_lines", "fact_text"))]
    ['kv_lines', 'fact_text']
    """
    return [retrieval_prompt(tokenizer, family, length, seed=seed + index, text=text)
            for family in families for index in range(per_family)]


def moved_pairs(tokenizer: Any, family: str, length: int, count: int, *, seed: int = 0,
                text: str | None = None) -> list[tuple[Prompt, Prompt]]:
    """``count`` (clean, corrupted) pairs of equal length and the same fact, the needle moved from a
    depth in [0.1, 0.4] to one in [0.6, 0.9]; each pair has its own haystack and depths. A haystack
    too short for the two depths to fall in different places gives no pair (the needle must move).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> [(a.answer == b.answer, len(a) == len(b)) for a, b in moved_pairs(ByteTokenizer(), "kv_lines", 400, 2)]
    [(True, True), (True, True)]
    """
    pairs: list[tuple[Prompt, Prompt]] = []
    candidate = seed
    while len(pairs) < count:
        rng = random.Random(f"pair-{family}-{candidate}")
        near, far = rng.uniform(0.1, 0.4), rng.uniform(0.6, 0.9)
        clean, moved = (retrieval_prompt(tokenizer, family, length, seed=candidate, depth=depth, text=text)
                        for depth in (near, far))
        if len(clean) == len(moved) and clean.spans["needle"][0] < moved.spans["needle"][0]:
            pairs.append((clean, moved))
        candidate += 1
        if candidate > seed + 20 * count + 20:
            raise InputError(f"could not build {count} equal-length {family} pairs of {length} tokens")
    return pairs
