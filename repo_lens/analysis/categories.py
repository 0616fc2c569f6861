"""Token categories for increments-by-category tables ("Learned position increments", Brendan Long): bytes and
subword tokens.

Two kinds of categories live here, on purpose side by side:

- **The post's scripts, exactly.** :data:`POST_BYTE_CATEGORIES` are the byte sets of the post's
  ``byte_boundary_analysis.py`` (its per-byte table: a-z, A-Z, digits, the CJK lead bytes 0xE4-0xE9,
  every continuation byte 0x80-0xBF, space, ``. ! ?``, ``, ; : -``, newline, EOS = 256; bytes in no set are
  not reported). :func:`vocabulary_categories` applies the rules of the delta-graft script
  ``analyze_deltas.py`` (its word lists and its order of tests) to a subword vocabulary. Use these to
  compare with the post's numbers.
- **Our partitions.** :func:`byte_categories` and :func:`subword_categories` give *every* token a category
  (all ASCII punctuation, a CJK lead byte decided by decoding its whole sequence, numbers, whitespace,
  special tokens), for in-context tables of any text. They are what the app and the increment tables use;
  they are not the scripts' sets, so their numbers differ from the post's where the sets differ.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Collection, Sequence

import numpy as np

from repo_lens.analysis._checks import as_list
from repo_lens.errors import InputError

BYTE_CATEGORIES: tuple[str, ...] = (
    "lowercase", "uppercase", "digit", "space", "punctuation", "newline",
    "cjk_lead", "continuation", "other_lead", "separator", "other",
)
SUBWORD_CATEGORIES: tuple[str, ...] = (
    "word_initial", "continuation", "punctuation", "number", "whitespace", "special",
)
SEPARATOR_ID = 256

# CJK ideographs encoded with 3 UTF-8 bytes: Extension A, Unified Ideographs, Compatibility Ideographs.
_CJK_BMP_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))
# Supplementary-plane ideographs (4 bytes; not cjk_lead bytes, but CJK characters for word boundaries).
_CJK_SUPPLEMENTARY = (0x20000, 0x323AF)


def is_cjk_char(char: str) -> bool:
    """True for a CJK ideograph (the BMP blocks plus the supplementary ideographic planes).

    Example:
        >>> is_cjk_char("中"), is_cjk_char("。"), is_cjk_char("a")
        (True, False, False)
    """
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in (*_CJK_BMP_RANGES, _CJK_SUPPLEMENTARY))


def byte_categories(token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Category of every token of a byte-level model (ids 0..255 UTF-8 bytes, 256 separator).

    ``lowercase`` a-z, ``uppercase`` A-Z, ``digit`` 0-9, ``space`` (space, tab), ``newline``
    (LF, CR), ``punctuation`` (ASCII punctuation), ``cjk_lead`` (lead byte of a 3-byte sequence
    that decodes to a CJK ideograph; decided from the following two bytes, so a sequence cut off
    by the end of the array is ``other_lead``), ``continuation`` (0x80-0xBF), ``other_lead``
    (any other UTF-8 lead byte 0xC2-0xF4, e.g. of é, 。 or an emoji), ``separator`` (id 256, the
    document separator / EOS), ``other`` (control bytes, DEL, bytes never valid in UTF-8).

    Example:
        >>> byte_categories(list("Hi 中!\\n".encode()) + [256]).tolist()
        ['uppercase', 'lowercase', 'space', 'cjk_lead', 'continuation', 'continuation', 'punctuation', 'newline', 'separator']
    """
    ids = np.asarray(token_ids)
    if ids.ndim != 1:
        raise InputError(f"token_ids has shape {ids.shape}; pass a 1-D sequence of token ids")
    if ids.size == 0:
        raise InputError("token_ids is empty; pass at least one token id")
    if ids.dtype.kind not in "iu" and not (ids.dtype.kind == "f" and np.all(ids == np.round(ids))):
        raise InputError(f"token_ids must be integers; got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.min() < 0 or ids.max() > SEPARATOR_ID:
        bad = int(ids[(ids < 0) | (ids > SEPARATOR_ID)][0])
        raise InputError(
            f"token id {bad} is not a byte-level id (0..255 bytes, 256 separator); "
            "for a subword tokenizer use subword_categories(tokens)"
        )
    padded = np.concatenate([ids, [-1, -1]])  # -1: no byte follows
    nxt1, nxt2 = padded[1:ids.size + 1], padded[2:ids.size + 2]
    three_byte = (ids >= 0xE0) & (ids <= 0xEF)
    cont1 = (nxt1 >= 0x80) & (nxt1 <= 0xBF)
    cont2 = (nxt2 >= 0x80) & (nxt2 <= 0xBF)
    code = ((ids & 0x0F) << 12) | ((nxt1 & 0x3F) << 6) | (nxt2 & 0x3F)
    in_cjk = np.zeros(ids.shape, dtype=bool)
    for lo, hi in _CJK_BMP_RANGES:
        in_cjk |= (code >= lo) & (code <= hi)
    punct = np.isin(ids, np.frombuffer(string.punctuation.encode(), dtype=np.uint8))
    conditions = [
        (ids >= ord("a")) & (ids <= ord("z")),
        (ids >= ord("A")) & (ids <= ord("Z")),
        (ids >= ord("0")) & (ids <= ord("9")),
        (ids == 0x20) | (ids == 0x09),
        punct,
        (ids == 0x0A) | (ids == 0x0D),
        three_byte & cont1 & cont2 & in_cjk,
        (ids >= 0x80) & (ids <= 0xBF),
        (ids >= 0xC2) & (ids <= 0xF4),
        ids == SEPARATOR_ID,
    ]
    return np.select(conditions, BYTE_CATEGORIES[:-1], default="other").astype(f"<U{max(map(len, BYTE_CATEGORIES))}")


_MARKERS = {"Ġ": " ", "▁": " ", "Ċ": "\n", "ĉ": "\t"}


_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _subword_category(token: str, special: Collection[str]) -> str:
    if token in special:
        return "special"
    byte = _BYTE_FALLBACK.fullmatch(token)
    if byte:  # SentencePiece byte fallback: an ASCII byte is read as its character
        value = int(byte.group(1), 16)
        if value >= 0x80:  # a piece of a multi-byte character
            return "continuation"
        token = chr(value)
    text = "".join(_MARKERS.get(char, char) for char in token)
    if not text.strip():
        return "whitespace"
    initial = text[0].isspace()
    core = text.strip()
    if all(unicodedata.category(c)[0] == "N" for c in core):
        return "number"
    if all(unicodedata.category(c)[0] in "PS" for c in core):
        return "punctuation"
    return "word_initial" if initial else "continuation"


def subword_categories(tokens: Sequence[str], special: Collection[str] = ()) -> np.ndarray:
    """Category of every subword token (display strings, e.g. ``tokenizer.convert_ids_to_tokens``).

    Byte-level BPE markers are read as whitespace ('Ġ' space, 'Ċ' newline, 'ĉ' tab), as is
    SentencePiece's '▁'; a byte-fallback token '<0xNN>' of an ASCII byte is read as that character
    (other bytes as a continuation). Rules, in order: ``special`` if the token is in ``special`` (e.g.
    ``{"<|endoftext|>"}``); ``whitespace`` if only whitespace; ``number`` if the rest is all digits /
    numerals; ``punctuation`` if all punctuation or symbols; ``word_initial`` if it starts with
    whitespace; else ``continuation``.

    Example:
        >>> subword_categories(["The", "Ġcat", "s", "Ġ42", ",", "Ċ", "▁dog"]).tolist()
        ['continuation', 'word_initial', 'continuation', 'number', 'punctuation', 'whitespace', 'word_initial']
    """
    tokens = as_list(tokens, "tokens", "a list of token strings (one per token)")
    if not tokens:
        raise InputError("tokens is empty; pass at least one token string")
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            raise InputError(f"token {index} is {type(token).__name__}, not str; pass display strings, not ids")
    special = set(special)
    labels = [_subword_category(token, special) for token in tokens]
    return np.asarray(labels, dtype=f"<U{max(map(len, SUBWORD_CATEGORIES))}")


# The learned-increments post's per-byte categories, as its script defines them (names and byte ids):
# experiments/selective_pe/byte_boundary_analysis.py, BYTE_CATEGORIES, in
# github.com/brendanlong/learned-position-increments-experiment.
POST_BYTE_CATEGORIES: dict[str, tuple[int, ...]] = {
    "English within-word (a-z)": tuple(range(ord("a"), ord("z") + 1)),
    "Capital letters (A-Z)": tuple(range(ord("A"), ord("Z") + 1)),
    "Digits (0-9)": tuple(range(ord("0"), ord("9") + 1)),
    "Chinese char start (lead 0xE4-0xE9)": tuple(range(0xE4, 0xEA)),
    "Chinese char interior (cont 0x80-0xBF)": tuple(range(0x80, 0xC0)),
    "Space": (0x20,),
    "Sentence punct (. ! ?)": (ord("."), ord("!"), ord("?")),
    "Other punct (, ; : -)": (ord(","), ord(";"), ord(":"), ord("-")),
    "Newline": (0x0A,),
    "EOS": (SEPARATOR_ID,),
}

# The delta-graft script's token categories and word lists: experiments/delta_graft/analyze_deltas.py,
# categorize(), in the same repository. Tests run in this order; a token matching none is "other".
VOCABULARY_CATEGORIES: tuple[str, ...] = (
    "sentence_punct", "other_punct", "function_word", "subword_continuation", "word_start", "other",
)
GRAFT_SENTENCE_PUNCT = frozenset({".", "!", "?", '."', '!"', '?"', ".)", "...", ".'"})
GRAFT_OTHER_PUNCT = frozenset({",", ";", ":", "\u2014", "-", "(", ")", '"', "'", "\u2019", "\u201d", "\u201c"})
GRAFT_FUNCTION_WORDS = frozenset({
    "the", "a", "an", "of", "to", "and", "in", "is", "it", "that",
    "for", "on", "as", "with", "was", "at", "by", "be", "this", "or",
})


def vocabulary_category(token: str) -> str:
    """The delta-graft script's category of one token string (as ``convert_ids_to_tokens`` gives it).

    Byte-level BPE markers are read first ('Ġ' a space, 'Ċ' a newline); then, on the token stripped of
    surrounding whitespace: ``sentence_punct`` (``. ! ? ." !" ?" .) ... .'``), ``other_punct`` (``, ; : — - ( )``
    and straight or curly quotes), ``function_word`` (one of 20 words, any case), ``subword_continuation``
    (letters only, no leading space), ``word_start`` (letters only after a leading space), else ``other``
    (numbers, mixed tokens, special tokens such as ``<|endoftext|>``, a lone newline).

    Example:
        >>> [vocabulary_category(t) for t in ["Ġthe", "ing", "ĠYork", ".", "Ġ,", "Ċ", "<|endoftext|>"]]
        ['function_word', 'subword_continuation', 'word_start', 'sentence_punct', 'other_punct', 'other', 'other']
    """
    spaced = token.replace("Ġ", " ").replace("Ċ", "\n")
    core = spaced.strip()
    if core in GRAFT_SENTENCE_PUNCT:
        return "sentence_punct"
    if core in GRAFT_OTHER_PUNCT:
        return "other_punct"
    if core.lower() in GRAFT_FUNCTION_WORDS:
        return "function_word"
    if core.isalpha():
        return "word_start" if spaced.startswith(" ") else "subword_continuation"
    return "other"


def vocabulary_categories(tokens: Sequence[str]) -> np.ndarray:
    """:func:`vocabulary_category` of every token: a (V,) str array (the delta-graft script's categories).

    Example:
        >>> vocabulary_categories(["Ġand", "Ġcat", "s", "?"]).tolist()
        ['function_word', 'word_start', 'subword_continuation', 'sentence_punct']
    """
    tokens = as_list(tokens, "tokens", 'tokenizer.convert_ids_to_tokens(range(vocab_size))')
    if not tokens:
        raise InputError("tokens is empty; pass one token string per vocabulary id")
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            raise InputError(f"token {index} is {type(token).__name__}, not str; pass the tokenizer's token strings "
                             "(convert_ids_to_tokens), not ids")
    return np.asarray([vocabulary_category(token) for token in tokens], dtype=f"<U{max(map(len, VOCABULARY_CATEGORIES))}")
