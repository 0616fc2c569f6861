"""Inputs: free text and presets turned into token ids (+ character offsets and named spans) for one
model's tokenizer, and traced. No Streamlit here, so it is easy to test and reuse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from repo_lens import InputError, Trace
from repo_lens.data import encode_with_offsets, fewshot_prompt, niah_single, reversal_prompt, table_prompt

from repo_lens.app.config import MAX_TEXT_BYTES

if TYPE_CHECKING:
    from repo_lens.protocol import LensProtocol


class Preset:
    """The sidebar's inputs, by name: the name is shown, bound to ``?input=`` in the URL, and is the
    ``kind`` of a :class:`Document`. Code compares with these, never with the names' text."""

    FREE_TEXT = "Free text"
    FEWSHOT = "Few-shot"
    NIAH = "NIAH"
    TABLE = "Table"
    CODE = "Code"
    CHINESE = "Chinese"
    REVERSAL = "Reversal"
    UPLOAD_TEXT = "Upload text file"  # read as free text


PRESETS = (Preset.FREE_TEXT, Preset.FEWSHOT, Preset.NIAH, Preset.TABLE, Preset.CODE, Preset.CHINESE,
           Preset.REVERSAL, Preset.UPLOAD_TEXT)

FREE_TEXT = ("Marie Curie was born in Warsaw and later moved to Paris, where she studied physics. "
             "The needle is hidden in the haystack. What is the needle?")
CODE = '''def fibonacci(n: int) -> list[int]:
    """The first n Fibonacci numbers."""
    numbers = [0, 1]
    while len(numbers) < n:
        numbers.append(numbers[-1] + numbers[-2])
    return numbers[:n]


print(fibonacci(10))
'''
CHINESE = ("人工智能是计算机科学的一个分支。它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出反应的智能机器。"
           "该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。")
FEWSHOT_EXAMPLES = (("cat", "chat"), ("dog", "chien"), ("house", "maison"), ("water", "eau"))
TABLE_HEADER = ("city", "country", "population (M)")
TABLE_ROWS = (("Oslo", "Norway", 0.7), ("Rome", "Italy", 2.8), ("Lima", "Peru", 10.0), ("Pune", "India", 7.4))

PRESET_TEXT = {Preset.FREE_TEXT: FREE_TEXT, Preset.CODE: CODE, Preset.CHINESE: CHINESE}


@dataclass
class Document:
    """One input encoded for one model: ids, per-token character offsets (None when the tokenizer
    has none), named token spans, and for prompts the query rows and the target span names."""

    kind: str
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]] | None
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    query: tuple[int, int] | None = None
    targets: list[str] = field(default_factory=list)
    beyond_context: bool = False  # traced and measured whole past the model's context (length extrapolation)


def build_document(lens: LensProtocol, kind: str, text: str, params: dict[str, Any]) -> Document:
    """Encode preset ``kind`` (one of PRESETS) or ``text`` with the lens' tokenizer."""
    tokenizer = lens.tokenizer
    if tokenizer is None:
        raise InputError("this checkpoint has no tokenizer, so it cannot read text; open a saved trace instead")
    if kind == Preset.NIAH:
        prompt = niah_single(tokenizer, int(params.get("length", 256)), float(params.get("depth", 0.5)),
                             seed=int(params.get("seed", 0)))
    elif kind == Preset.FEWSHOT:
        prompt = fewshot_prompt(tokenizer, FEWSHOT_EXAMPLES, "bird", "oiseau", instruction="Translate English to French.")
    elif kind == Preset.TABLE:
        prompt = table_prompt(tokenizer, TABLE_HEADER, TABLE_ROWS, "Which city has 2.8 million people?", "Rome")
    elif kind == Preset.REVERSAL:
        prompt = reversal_prompt(tokenizer, int(params.get("words", 12)), int(params.get("seed", 0)))
    else:
        return encode_text(tokenizer, kind, text)
    offsets = _offsets_or_none(tokenizer, prompt.text, len(prompt.ids))
    return Document(kind=kind, text=prompt.text, ids=[int(i) for i in prompt.ids], offsets=offsets,
                    spans=dict(prompt.spans), query=cast("tuple[int, int]", tuple(prompt.query)),
                    targets=list(prompt.meta.get("targets", [])),
                    beyond_context=bool(params.get("beyond_context", False)))


REVERSAL_MAX_WORDS = 40


def max_reversal_words(tokenizer: Any, context: int | None, most: int = REVERSAL_MAX_WORDS) -> int:
    """The most words (≤ ``most``) whose reversal prompt, answer included, fits ``context`` tokens; 0 if not even 2.

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> max_reversal_words(ByteTokenizer(), 10_000), max_reversal_words(ByteTokenizer(), 10)
    (40, 0)
    """
    if context is None:
        return most
    low, high = 1, most  # the longest prompt grows with the word count: binary search
    while low < high:
        middle = (low + high + 1) // 2
        if len(reversal_prompt(tokenizer, middle, 0).ids) <= context:
            low = middle
        else:
            high = middle - 1
    return low if low >= 2 and len(reversal_prompt(tokenizer, low, 0).ids) <= context else 0


def encode_text(tokenizer: Any, kind: str, text: str) -> Document:
    if not isinstance(text, str) or not text.strip():
        raise InputError("the text is empty; type or upload some text")
    size = len(text.encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise InputError(f"the text is {size:,} bytes; the app reads at most {MAX_TEXT_BYTES // 2**20} MB "
                         f"({MAX_TEXT_BYTES:,} bytes)")
    try:
        ids, offsets = encode_with_offsets(tokenizer, text)
    except InputError:  # a tokenizer without offsets (slow tokenizer): no character offsets
        ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
        offsets = None
    if not ids:
        raise InputError("the text encodes to no tokens")
    return Document(kind=kind, text=text, ids=[int(i) for i in ids], offsets=offsets)


def _offsets_or_none(tokenizer: Any, text: str, n: int) -> list[tuple[int, int]] | None:
    try:
        ids, offsets = encode_with_offsets(tokenizer, text)
    except InputError:
        return None
    return offsets if len(ids) == n else None


def trace_document(lens: LensProtocol, doc: Document, truncate: bool) -> Trace:
    """Trace the document's ids; spans inside the kept tokens, char offsets (``extras["char_offsets"]``)
    and the input text (``meta["input"]``) travel with the trace so a saved trace keeps them."""
    trace = lens.trace(np.asarray(doc.ids, dtype=np.int64), truncate=truncate and not doc.beyond_context,
                       allow_beyond_context=doc.beyond_context, progress=False)
    n = len(trace)
    trace.spans = {name: (a, b) for name, (a, b) in doc.spans.items() if b <= n}
    if doc.offsets is not None:
        trace.extras["char_offsets"] = np.asarray(doc.offsets[:n], dtype=np.int64).reshape(-1, 2)
    trace.meta["input"] = {"kind": doc.kind, "text": doc.text, "query": list(doc.query) if doc.query else None,
                           "targets": doc.targets}
    return trace


def document_of_trace(trace: Trace) -> Document | None:
    """The input text and offsets stored in a trace by :func:`trace_document`, if any."""
    info = trace.meta.get("input") if isinstance(trace.meta, dict) else None
    offsets = trace.extras.get("char_offsets")
    if not isinstance(info, dict) or not isinstance(info.get("text"), str):
        return None
    pairs = ([cast("tuple[int, int]", tuple(map(int, pair))) for pair in offsets.tolist()]
             if offsets is not None else None)
    query = info.get("query")
    return Document(kind=str(info.get("kind", "text")), text=info["text"], ids=trace.token_ids.tolist(),
                    offsets=pairs, spans=dict(trace.spans), query=tuple(query) if query else None,
                    targets=list(info.get("targets") or []))
