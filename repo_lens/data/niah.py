"""RULER-style needle-in-a-haystack prompts at a requested token length and needle depth.

Wording follows RULER (Hsieh et al., ``scripts/data/synthetic/niah.py``): needles
"One of the special magic numbers for {key} is: {value}.", the template "Some special magic
numbers are hidden within the following text. ... What are all the special magic numbers for
{query} mentioned in the provided text? The special magic numbers for {query} mentioned in
the provided text are", switched to the singular ("A special magic number is hidden ...
What is the special magic number ...") when one value is asked for, as RULER does. Keys are
adjective-noun words (or numbers / uuids), values 7-digit numbers, drawn from
``random.Random(seed)``. The haystack is RULER's repeated noise block (one block per line)
or real text (a string or a list of sentences; cycled if too short).

Spans (token spans in ``Prompt.spans``; they nest, pick disjoint ones):
``instruction``, ``context`` (haystack with needles), ``needle``/``key``/``value`` (one
needle) or ``needle_i``/``key_i``/``value_i`` (several, numbered in text order),
``question``, ``answer_prefix``, ``query`` (question + answer prefix, the paper's "Query"),
and ``answer`` (the appended answer = the query rows, the paper's "generated tokens").
For RePo Table 4 use ``attention_mass(lens, p.ids, p.pick(*p.meta["targets"], "query"), p.query)``
(needle = the tokens of the golden answer in the context).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from repo_lens.data.spans import Prompt, PromptBuilder, PromptEncoding, encode_with_offsets
from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, options_or_default

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
    " The special magic {type_needle_v} for {query} mentioned in the provided text are"
)
TYPE_NEEDLE_V = "numbers"
MAX_PROMPT_TOKENS = 2**21  # far beyond any context; a longer prompt would take hours to build

_ADJECTIVES = (
    "ancient bitter brave bright calm clever cold curious damp eager early fancy fierce gentle "
    "giant glossy golden grumpy hollow humble icy jolly lazy little lively loud lucky misty "
    "narrow noisy odd pale polite proud quiet rapid rough royal rusty silent silky sleepy "
    "smooth sour steady stormy sturdy sweet swift tall tender tiny vivid wild witty young"
).split()
_NOUNS = (
    "anchor apple badger basket beacon bicycle blanket bottle bridge button candle canyon "
    "castle cherry cloud comet cottage crayon desert dolphin engine falcon feather forest "
    "garden glacier hammer harbor island jacket kettle ladder lantern lemon meadow mirror "
    "needle orchard otter pebble pepper piano pillow planet rabbit ribbon river saddle "
    "shadow spoon teapot thunder tiger violin wagon walnut window"
).split()

_SENTENCE = re.compile(r"\S.*?(?:[.!?。！？]+[\"'”’)\]」』]*(?=\s|$)|[。！？]+[\"'”’)\]」』]*|$)(\s*)", re.S)


def _singular(text: str) -> str:
    # RULER's replacements when one value is asked for (num_needle_q * num_needle_v == 1)
    return text.replace("Some", "A").replace("are all", "is").replace("are", "is")


def _split_sentences(text: str) -> list[tuple[str, str]]:
    """(sentence, separator that followed it) pairs of a running text."""
    units = []
    for match in _SENTENCE.finditer(text):
        sentence = match.group(0).rstrip()
        gap = match.group(1)
        if sentence:
            units.append((sentence, "\n" if "\n" in gap else (" " if gap else "")))
    return units


def _haystack_units(haystack: str | Sequence[str] | None) -> tuple[list[tuple[str, str]], str]:
    if haystack is None:
        return [(NOISE, "\n")], "noise"
    if isinstance(haystack, str):
        units = _split_sentences(haystack)
    elif not isinstance(haystack, Sequence):
        raise InputError(f"haystack must be text, a list of sentences or None (RULER noise); got "
                         f"{type(haystack).__name__}")
    else:
        units = []
        for sentence in haystack:
            if not isinstance(sentence, str):
                raise InputError(f"haystack sentences must be str, got {type(sentence).__name__}")
            sentence = sentence.strip()
            if sentence:
                units.append((sentence, "" if re.search(r"[。！？」』”]$", sentence) else " "))
    if not units:
        raise InputError("the haystack text is empty; pass real text, a list of sentences, or None for RULER noise")
    return units, "text"


def _random_key(rng: random.Random, key_type: str) -> str:
    if key_type == "words":
        return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
    if key_type == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if key_type == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise InputError(f"unknown key_type {key_type!r}; use 'words', 'numbers' or 'uuids'")


def _unique(draw, count: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    for _ in range(1000 * count):
        if len(out) == count:
            break
        item = draw()
        if item not in taken:
            taken.add(item)
            out.append(item)
    if len(out) < count:
        raise InputError(f"could not draw {count} distinct keys/values; ask for fewer needles")
    return out


class _Haystack:
    """The haystack as one long string (units cycled), its unit boundaries and word-end cut points."""

    def __init__(self, units: list[tuple[str, str]]) -> None:
        self.units = units
        self.text = ""
        self.boundaries: list[tuple[int, str]] = []  # (char index right after a unit, separator there)
        self._next = 0

    def extend_to(self, n_chars: int) -> None:
        pieces, length = [self.text], len(self.text)
        while length < n_chars:
            sentence, sep = self.units[self._next % len(self.units)]
            if length:
                pieces.append(self.boundaries[-1][1])
                length += len(self.boundaries[-1][1])
            pieces.append(sentence)
            length += len(sentence)
            self.boundaries.append((length, sep))
            self._next += 1
        self.text = "".join(pieces)

    def cuts(self) -> list[int]:
        """Char indices c where text[:c] ends at a word (or CJK character) end."""
        text = self.text
        return [
            index + 1
            for index, char in enumerate(text)
            if not char.isspace() and (index + 1 == len(text) or text[index + 1].isspace() or ord(char) > 0x2E7F)
        ]


def _depth_list(depth: float | Sequence[float], n_needles: int) -> list[float]:
    if isinstance(depth, (str, bytes)) or not isinstance(depth, (int, float, Sequence)):
        raise InputError(f"needle depth {depth!r:.40} must be a fraction in [0.0, 1.0] or a list of them")
    depths = [depth] * n_needles if isinstance(depth, (int, float)) else list(depth)
    if len(depths) != n_needles:
        raise InputError(f"got {len(depths)} depths for {n_needles} needles; pass one depth or one per needle")
    for value in depths:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise InputError(f"needle depth {value!r} must be a fraction of the haystack in [0.0, 1.0]")
    return [float(value) for value in depths]


@dataclass(frozen=True, kw_only=True)
class NiahSpec:
    """Which RULER NIAH task a prompt poses: ``num_keys`` > 1 adds distractor needles with other keys
    (multi-key), ``num_values`` > 1 puts several values under each key (multi-value), ``num_queries`` > 1 asks
    for several keys (multi-query); keys are ``key_type`` ("words", "numbers" or "uuids"), values numbers of
    ``value_digits`` digits.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> p = niah_prompt(ByteTokenizer(), 900, spec=NiahSpec(num_keys=3, key_type="numbers"))
        >>> len(p.meta["needles"])
        3
    """

    num_keys: int = 1
    num_values: int = 1
    num_queries: int = 1
    key_type: str = "words"
    value_digits: int = 7


@grouped_keywords("spec", NiahSpec)
@grouped_keywords("encoding", PromptEncoding)
def niah_prompt(
    tokenizer: Any,
    length: int,
    depth: float | Sequence[float] = 0.5,
    *,
    spec: NiahSpec | None = None,
    haystack: str | Sequence[str] | None = None,
    seed: int = 0,
    encoding: PromptEncoding | None = None,
) -> Prompt:
    """A RULER NIAH prompt of at most ``length`` tokens (answer included), as close as one haystack word allows.

    ``depth``: where the needles go, as a fraction of the haystack (0 = start, 1 = end); one
    value puts all needles together there, a list gives one depth per needle (text order).
    ``spec``: the task (:class:`NiahSpec`: keys, values, queries; default one needle, asked for).
    ``encoding`` (:class:`repo_lens.data.spans.PromptEncoding`): with ``append_answer`` the answer (values
    joined by ", ") is appended and its tokens are ``Prompt.query``; otherwise the last ``last_k`` tokens are.

    Example:
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> p = niah_prompt(ByteTokenizer(), 600, depth=0.5, seed=1)
        >>> len(p.ids) <= 600, p.span_text("value") == p.answer
        (True, True)
        >>> p.text.splitlines()[0].split(". ")[0]
        'A special magic number is hidden within the following text'
    """
    spec = options_or_default(spec, NiahSpec, "spec")
    encoding = options_or_default(encoding, PromptEncoding, "encoding")
    num_values, num_queries, key_type, value_digits = spec.num_values, spec.num_queries, spec.key_type, spec.value_digits
    _check_sizes(length, spec.num_keys, num_values, num_queries, value_digits)
    num_keys = max(spec.num_keys, num_queries)
    depths = _depth_list(depth, num_keys * num_values)
    units, haystack_kind = _haystack_units(haystack)
    draw = _draw_needles(seed, key_type, num_keys, num_values, num_queries, value_digits)
    layout = _Layout(
        tokenizer=tokenizer, wording=_wording([draw.keys[i] for i in draw.queried], num_queries * num_values == 1),
        needles=draw.needles, depths=depths, default_sep="\n" if haystack_kind == "noise" else " ",
        answer=", ".join(draw.answers), append_answer=encoding.append_answer, last_k=encoding.last_k,
        add_special_tokens=encoding.add_special_tokens,
    )
    best, order, stack, best_cut = _fit_haystack(layout, units, length)
    units_used = sum(1 for end, _ in stack.boundaries if end <= best_cut)
    best.meta.update(_meta(best, layout, draw, order, length=length, depths=depths, haystack_kind=haystack_kind,
                           haystack_repeated=haystack_kind == "text" and units_used > len(units), seed=seed))
    return best


def _check_sizes(length: Any, num_keys: Any, num_values: Any, num_queries: Any, value_digits: Any) -> None:
    for name, value in (("num_keys", num_keys), ("num_values", num_values), ("num_queries", num_queries)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= MAX_PROMPT_TOKENS:
        raise InputError(f"length must be a positive number of tokens, at most {MAX_PROMPT_TOKENS:,}; got {length!r}")
    if num_keys * num_values > length:
        raise InputError(f"{num_keys} keys x {num_values} values need more than {num_keys * num_values} needles' "
                         f"tokens; a prompt of {length} tokens cannot hold them: ask for fewer or a longer prompt")
    if not isinstance(value_digits, int) or not 1 <= value_digits <= 18:
        raise InputError(f"value_digits must be in 1..18, got {value_digits!r}")


@dataclass(frozen=True)
class _Draw:
    """The needles drawn from ``random.Random(seed)``: keys, (key index, key, value) in the shuffled
    order they are placed in, the indices of the keys asked for, and the values that answer."""

    keys: list[str]
    needles: list[tuple[int, str, str]]
    queried: list[int]
    answers: list[str]


def _draw_needles(seed: int, key_type: str, num_keys: int, num_values: int, num_queries: int,
                  value_digits: int) -> _Draw:
    rng = random.Random(seed)
    taken: set[str] = set()
    keys = _unique(lambda: _random_key(rng, key_type), num_keys, taken)
    low, high = 10 ** (value_digits - 1), 10**value_digits - 1
    values = [_unique(lambda: str(rng.randint(low, high)), num_values, taken) for _ in keys]
    needles = [(k, key, v) for k, key in enumerate(keys) for v in values[k]]
    rng.shuffle(needles)
    queried = rng.sample(range(num_keys), num_queries)
    return _Draw(keys, needles, queried, [value for index in queried for value in values[index]])


@dataclass(frozen=True)
class _Wording:
    """RULER's template cut around the haystack: the instruction, the question and the answer prefix."""

    head: str
    question: str
    prefix: str
    type_v: str


def _wording(asked: list[str], singular: bool) -> _Wording:
    query_text = asked[0] if len(asked) == 1 else ", ".join(asked[:-1]) + ", and " + asked[-1]
    type_v = TYPE_NEEDLE_V[:-1] if singular else TYPE_NEEDLE_V
    template = _singular(TEMPLATE) if singular else TEMPLATE
    head, rest = template.split("{context}")
    question, prefix = rest.split("?", 1)
    question = question.format(type_needle_v=type_v, query=query_text) + "?"
    return _Wording(head=head.format(type_needle_v=type_v), question=question.lstrip("\n"),
                    prefix=prefix.format(type_needle_v=type_v, query=query_text), type_v=type_v)


def _numbered(name: str, count: int) -> list[str]:
    return [name] if count == 1 else [f"{name}_{i}" for i in range(count)]


@dataclass(frozen=True)
class _Layout:
    """Everything but the haystack: :meth:`build` lays out a prompt around a given haystack string."""

    tokenizer: Any
    wording: _Wording
    needles: list[tuple[int, str, str]]
    depths: list[float]
    default_sep: str
    answer: str
    append_answer: bool
    last_k: int
    add_special_tokens: bool

    def names(self, kind: str) -> list[str]:
        """Span names of the needles (``kind``: needle, key or value), in text order."""
        return _numbered(kind, len(self.needles))

    def build(self, hay: str, boundaries: list[tuple[int, str]]) -> tuple[Prompt, list[int]]:
        """The prompt with ``hay`` as haystack (``boundaries``: its unit ends), and the needles' text order."""
        chosen = self._insertion_points(hay, boundaries)
        order = sorted(range(len(self.needles)), key=lambda i: chosen[i][0])  # stable: the shuffled order stays
        b = PromptBuilder()
        b.add(self.wording.head.rstrip("\n"), "instruction")
        b.add("\n")
        self._add_context(b, hay, chosen, order)
        b.add("\n")
        b.add(self.wording.question, "question", "query")
        b.add(" ")
        b.add(self.wording.prefix.lstrip(" "), "answer_prefix", "query")
        built = b.build(self.tokenizer, self.answer, append_answer=self.append_answer, last_k=self.last_k,
                        trim_from="query", add_special_tokens=self.add_special_tokens)
        return built, order

    def _insertion_points(self, hay: str, boundaries: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """(char index, separator) each needle goes to: the unit boundary (or the start or end of
        ``hay``) nearest its depth; ``hay[end:]`` starts with the separator."""
        points = [(0, self.default_sep)] + [(end, sep) for end, sep in boundaries if end < len(hay)]
        points.append((len(hay), self.default_sep))
        return [min(points, key=lambda point: (abs(point[0] - d * len(hay)), point[0])) for d in self.depths]

    def _add_context(self, b: PromptBuilder, hay: str, chosen: list[tuple[int, str]], order: list[int]) -> None:
        cursor = 0
        for count, index in enumerate(order):
            at, sep = chosen[index]
            b.add(hay[cursor:at], "context")
            cursor = at
            if count > 0 and chosen[order[count - 1]][0] == at:
                b.add(sep or " ", "context")  # between two needles at one point
            elif at > 0:
                b.add(sep, "context")  # CJK text has no separator: none around the needle either
            self._add_needle(b, count, *self.needles[index][1:])
        if cursor < len(hay):
            if cursor == 0 and order:
                b.add(self.default_sep, "context")
            b.add(hay[cursor:], "context")

    def _add_needle(self, b: PromptBuilder, count: int, key: str, value: str) -> None:
        needle, key_name, value_name = (self.names(kind)[count] for kind in ("needle", "key", "value"))
        before, after = NEEDLE.format(type_needle_v=TYPE_NEEDLE_V, key="\0", value="\1").split("\0")
        middle, tail = after.split("\1")
        b.add(before, "context", needle)
        b.add(key, "context", needle, key_name)
        b.add(middle, "context", needle)
        b.add(value, "context", needle, value_name)
        b.add(tail, "context", needle)


def _fit_haystack(layout: _Layout, units: list[tuple[str, str]],
                  length: int) -> tuple[Prompt, list[int], _Haystack, int]:
    """The longest prompt of at most ``length`` tokens (the haystack cut at a word end), its needles'
    order, the haystack it was cut from and the cut."""
    best, order = layout.build("", [])
    if len(best.ids) > length:
        raise InputError(
            f"length={length} is too short: the prompt without any haystack already takes "
            f"{len(best.ids)} tokens; ask for a longer prompt"
        )
    stack = _Haystack(units)
    _grow_haystack(stack, layout.tokenizer, needed=length - len(best.ids) + 2)
    cuts = stack.cuts()
    lo, hi, best_cut = 0, len(cuts) - 1, 0
    while lo <= hi:  # the largest cut (at a word end) whose prompt fits
        mid = (lo + hi) // 2
        candidate, candidate_order = layout.build(stack.text[: cuts[mid]], stack.boundaries)
        if len(candidate.ids) <= length:
            best, order, best_cut, lo = candidate, candidate_order, cuts[mid], mid + 1
        else:
            hi = mid - 1
    return best, order, stack, best_cut


def _grow_haystack(stack: _Haystack, tokenizer: Any, needed: int) -> None:
    """Extend ``stack`` until its text holds more than ``needed`` tokens (guessing the length from
    a first sample's characters per token)."""
    stack.extend_to(2000)
    sample, _ = encode_with_offsets(tokenizer, stack.text, add_special_tokens=False)
    stack.extend_to(int(1.2 * needed * len(stack.text) / max(1, len(sample))) + 200)
    while True:
        ids, _ = encode_with_offsets(tokenizer, stack.text, add_special_tokens=False)
        if len(ids) >= needed:
            break
        stack.extend_to(2 * len(stack.text))


def _meta(best: Prompt, layout: _Layout, draw: _Draw, order: list[int], *, length: int, depths: list[float],
          haystack_kind: str, haystack_repeated: bool, seed: int) -> dict[str, Any]:
    needle_names, key_names, value_names = (layout.names(kind) for kind in ("needle", "key", "value"))
    records = []
    for count, index in enumerate(order):
        key_index, key, value = draw.needles[index]
        records.append({"name": needle_names[count], "key_name": key_names[count], "value_name": value_names[count],
                        "key": key, "value": value, "target": key_index in draw.queried})
    num_keys, num_values, num_queries = len(draw.keys), len(draw.needles) // len(draw.keys), len(draw.queried)
    context = best.spans.get("context", (0, 0))
    return {
        "task": "niah",
        "kind": ("multiquery" if num_queries > 1 else "multivalue" if num_values > 1
                 else "multikey" if num_keys > 1 else "single"),
        "length": length,
        "n_tokens": len(best.ids),
        "depth": depths,
        "needle_token_depth": [
            (best.spans[name][0] - context[0]) / max(1, context[1] - context[0]) for name in needle_names
        ],
        "needles": records,
        "targets": [record["value_name"] for record in records if record["target"]],
        "keys": draw.keys,
        "queries": [draw.keys[i] for i in draw.queried],
        "answers": draw.answers,
        "haystack": haystack_kind,
        "haystack_repeated": haystack_repeated,
        "seed": seed,
        "type_needle_v": layout.wording.type_v,
    }


@grouped_keywords("spec", NiahSpec)
@grouped_keywords("encoding", PromptEncoding)
def niah_single(tokenizer: Any, length: int, depth: float = 0.5, **kwargs: Any) -> Prompt:
    """RULER niah_single: one needle, asked for (``kwargs``: those of :func:`niah_prompt`).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> niah_single(ByteTokenizer(), 400).meta["kind"]
    'single'
    """
    return niah_prompt(tokenizer, length, depth, **kwargs)


@grouped_keywords("spec", NiahSpec, names=("num_values", "num_queries", "key_type", "value_digits"))
@grouped_keywords("encoding", PromptEncoding)
def niah_multikey(tokenizer: Any, length: int, depth: float | Sequence[float] = 0.5, num_keys: int = 4, *,
                  spec: NiahSpec | None = None, **kwargs: Any) -> Prompt:
    """RULER niah_multikey: ``num_keys`` needles with different keys, one asked for (``spec``: the rest of the
    task; ``kwargs``: those of :func:`niah_prompt`).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> len(niah_multikey(ByteTokenizer(), 800).meta["needles"])
    4
    """
    spec = replace(options_or_default(spec, NiahSpec, "spec"), num_keys=num_keys)
    return niah_prompt(tokenizer, length, depth, spec=spec, **kwargs)


@grouped_keywords("spec", NiahSpec, names=("num_keys", "num_queries", "key_type", "value_digits"))
@grouped_keywords("encoding", PromptEncoding)
def niah_multivalue(tokenizer: Any, length: int, depth: float | Sequence[float] = 0.5, num_values: int = 4, *,
                    spec: NiahSpec | None = None, **kwargs: Any) -> Prompt:
    """RULER niah_multivalue: ``num_values`` needles for one key, all asked for (``spec``: the rest of the
    task; ``kwargs``: those of :func:`niah_prompt`).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> len(niah_multivalue(ByteTokenizer(), 800).meta["answers"])
    4
    """
    spec = replace(options_or_default(spec, NiahSpec, "spec"), num_values=num_values)
    return niah_prompt(tokenizer, length, depth, spec=spec, **kwargs)


@grouped_keywords("spec", NiahSpec, names=("num_keys", "num_values", "key_type", "value_digits"))
@grouped_keywords("encoding", PromptEncoding)
def niah_multiquery(tokenizer: Any, length: int, depth: float | Sequence[float] = 0.5, num_queries: int = 4, *,
                    spec: NiahSpec | None = None, **kwargs: Any) -> Prompt:
    """RULER niah_multiquery: ``num_queries`` keys asked for at once (``spec``: the rest of the task;
    ``kwargs``: those of :func:`niah_prompt`).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> len(niah_multiquery(ByteTokenizer(), 800).meta["queries"])
    4
    """
    spec = replace(options_or_default(spec, NiahSpec, "spec"), num_queries=num_queries)
    return niah_prompt(tokenizer, length, depth, spec=spec, **kwargs)
