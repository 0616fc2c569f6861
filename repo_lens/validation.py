"""Index checks shared by every entry point that takes a layer or head number.

Indices follow Python's convention: ``0..size-1`` from the start, ``-size..-1`` from the end.
Anything that is not an integer (``1.5``, ``2.0``, ``"1"``, ``True``) is refused rather than
rounded or coerced, as numpy refuses ``array[1.5]``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from repo_lens.errors import InputError


def check_index(value: Any, size: int, name: str, *, owner: str = "trace") -> int:
    """``value`` as an index into ``size`` items, in ``0..size-1`` (negatives count from the end).

    ``name`` says what is indexed ("layer", "head"), ``owner`` what holds the items; both appear
    in the InputError raised for a non-integer (bools included) or an index out of range.

    Example:
        >>> import numpy as np
        >>> check_index(2, 4, "head"), check_index(-1, 4, "head"), check_index(np.int64(3), 4, "head")
        (2, 3, 3)
        >>> try:
        ...     check_index(1.5, 4, "head")
        ... except InputError as error:
        ...     print(error)
        head 1.5 is not an integer index (got float); pass an int in 0..3 (or -4..-1 to count from the end)
    """
    if size < 1:
        raise InputError(f"this {owner} has no {name}s; there is no {name} {value!r} to pick")
    valid = f"0..{size - 1} (or -{size}..-1 to count from the end)"
    index = _integer(value, name, f"pass an int in {valid}")
    if not -size <= index < size:
        raise InputError(f"{name} {index} does not exist; this {owner} has {name}s {valid}")
    return index % size


def check_indices(value: Any, size: int | None, name: str, *, owner: str = "model") -> list[int]:
    """``value``, one index or a 1-D sequence of them (list, tuple, range, 1-D numpy array or tensor), as a
    list of ints in the order given, each checked by :func:`check_index` (negatives count from the end).
    A bare int selects one; a str, a mapping, a bool mask, a 2-D array, a nested sequence or an empty
    selection is an InputError naming ``name``. ``size=None`` checks the types only (negatives kept),
    for a caller that checks the range against several sizes.

    Example:
        >>> import numpy as np
        >>> check_indices([0, -1], 4, "head"), check_indices(np.int64(2), 4, "head"), check_indices(np.arange(2), 4, "head")
        ([0, 3], [2], [0, 1])
        >>> try:
        ...     check_indices("01", 4, "head")
        ... except InputError as error:
        ...     print(error)
        heads '01' is a str, not head indices; pass an int or a list of ints in 0..3, e.g. [0, 1]
    """
    valid = "an int or a list of ints" + ("" if size is None else f" in 0..{size - 1}")
    if isinstance(value, (str, bytes, Mapping)):
        raise InputError(f"{name}s {value!r:.60} is a {type(value).__name__}, not {name} indices; pass {valid}, "
                         "e.g. [0, 1]")
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.ndim > 1:
            raise InputError(f"{name}s has shape {value.shape}; pass one {name} index or a 1-D list of them")
        if value.dtype == bool:
            raise InputError(f"{name}s is a bool array (a mask); pass the indices it selects, e.g. "
                             f"np.flatnonzero(mask), or {valid}")
        items = [value[()]] if value.ndim == 0 else list(value)
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        items = [value]  # one index; anything but an int is refused below
    if not items:
        raise InputError(f"no {name}s selected; pass None for every one, or {valid}")
    if size is not None:
        return [check_index(item, size, name, owner=owner) for item in items]
    return [_integer(item, name, "pass an int") for item in items]


_BOOLS = ("bool", "torch.bool")


def _integer(value: Any, name: str, valid: str) -> int:
    """``value`` as an int (numpy ints too); a bool, float, str, None or an array of one element (which torch
    would turn into its element) is an InputError saying ``valid``."""
    try:
        if isinstance(value, bool) or getattr(value, "ndim", 0) != 0 or str(getattr(value, "dtype", "")) in _BOOLS:
            raise TypeError
        return operator.index(value)
    except TypeError:
        hint = f"give the int {int(value)}, not {value!r}; " if _is_integral_float(value) else ""
        raise InputError(
            f"{name} {value!r} is not an integer index (got {type(value).__name__}); {hint}{valid}"
        ) from None


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (numpy ints too), at least ``minimum`` when given; a float (even 2.0), str,
    bool or None is an InputError naming ``name``, what was given and what is expected.

    Example:
        >>> check_int(3, "n_scored", minimum=0)
        3
        >>> try:
        ...     check_int(-1, "n_scored", minimum=0)
        ... except InputError as error:
        ...     print(error)
        n_scored must be an int >= 0, got -1
    """
    expected = "an int" if minimum is None else f"an int >= {minimum}"
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise InputError(f"{name} must be {expected}, got {value!r} ({type(value).__name__})") from None
    if minimum is not None and number < minimum:
        raise InputError(f"{name} must be {expected}, got {number}")
    return number


def check_positive_number(value: Any, name: str) -> float:
    """``value`` as a finite float > 0; a str, bool, None, NaN, inf, zero or negative is an InputError.

    Example:
        >>> check_positive_number(8, "font_pt")
        8.0
        >>> try:
        ...     check_positive_number(float("nan"), "font_pt")
        ... except InputError as error:
        ...     print(error)
        font_pt must be a finite number > 0, got nan
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a finite number > 0, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not (np.isfinite(number) and number > 0):
        raise InputError(f"{name} must be a finite number > 0, got {number!r}")
    return number


def _is_integral_float(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and bool(np.isfinite(value)) and float(value).is_integer()


_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # where errors="surrogateescape" puts undecodable bytes 0x80..0xff


def utf8_bytes(text: str, what: str = "the text") -> bytes:
    """``text`` encoded as UTF-8; a character UTF-8 cannot encode (a lone surrogate) is an InputError
    naming its position and the fix, never a UnicodeEncodeError.

    Python gives lone surrogates for undecodable bytes on the command line and in files read
    with ``errors="surrogateescape"``; the message then names the byte.

    Example:
        >>> utf8_bytes("hé")
        b'h\\xc3\\xa9'
        >>> try:
        ...     utf8_bytes("ab\\udcff")
        ... except InputError as error:
        ...     print(str(error)[:77])
        the text is not valid UTF-8: character 2 stands for the undecodable byte 0xff
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        if code in _ESCAPED_BYTES:
            problem = (f"character {error.start} stands for the undecodable byte 0x{code - 0xDC00:02x} (invalid UTF-8, "
                       "as the command line or a file read with errors='surrogateescape' gives)")
            fix = "pass UTF-8 text (re-encode the source as UTF-8), or decode the bytes with errors='replace'"
        else:
            problem = f"character {error.start} is a lone surrogate U+{code:04X}, which is not a Unicode character"
            fix = "remove it, or join surrogate pairs with text.encode('utf-16', 'surrogatepass').decode('utf-16')"
        raise InputError(f"{what} is not valid UTF-8: {problem}; {fix}") from None


def json_nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in the JSON ``text``, counted without parsing it, so a
    caller can refuse a hostile document before ``json.loads`` recurses into it.

    Example:
        >>> json_nesting_depth('{"a": [1, {"b": "[[\\\\\\"["}]}'), json_nesting_depth("3")
        (3, 0)
    """
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if codes.size == 0:
        return 0
    index = np.arange(codes.size)
    # a quote is escaped when an odd number of backslashes runs up to it
    last_plain = np.maximum.accumulate(np.where(codes != ord("\\"), index, -1))
    backslashes_before = np.concatenate(([0], index[:-1] - last_plain[:-1]))
    quotes = (codes == ord('"')) & (backslashes_before % 2 == 0)
    outside = np.cumsum(quotes) % 2 == 0
    opens = np.isin(codes, (ord("["), ord("{"))) & outside
    closes = np.isin(codes, (ord("]"), ord("}"))) & outside
    return int(np.cumsum(opens.astype(np.int64) - closes).max(initial=0))


def require_lens_model(lens: object, what: str) -> Any:
    """``lens.model``, the repo_lens model that ``what`` runs with its hooks; anything else (an HFLens from
    :func:`repo_lens.hf.load_hf`, which runs a Hugging Face model through nnsight) is an InputError
    naming what ``what`` needs and the alternative.

    Example:
        >>> from types import SimpleNamespace
        >>> try:
        ...     require_lens_model(SimpleNamespace(hf_model=None), "ablate")
        ... except InputError as error:
        ...     print(str(error)[:83])
        ablate needs a model loaded by repo_lens (a Lens from repo_lens.load, whose .model
    """
    model = getattr(lens, "model", None)
    if model is not None and hasattr(model, "cfg") and hasattr(model, "hooks"):
        return model
    if hasattr(lens, "hf_model"):
        raise InputError(
            f"{what} needs a model loaded by repo_lens (a Lens from repo_lens.load, whose .model it reads or edits "
            f"through its hooks); got {type(lens).__name__}, the generic Hugging Face path (load_hf), which has no "
            "such model. Load the checkpoint with repo_lens.load(path) if repo_lens has an adapter for it (Llama, "
            "OLMo-2, RePo); for other architectures the generic path offers trace_hf, attention_mass_hf and "
            "score_decomposition"
        )
    raise InputError(f"{what} needs a Lens from repo_lens.load (with a .model that repo_lens runs); "
                     f"got {type(lens).__name__}")
