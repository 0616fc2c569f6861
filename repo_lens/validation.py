"""Index checks shared by every entry point that takes a layer or head number.

Indices follow Python's convention: ``0..size-1`` from the start, ``-size..-1`` from the end.
Anything that is not an integer (``1.5``, ``2.0``, ``"1"``, ``True``) is refused rather than
rounded or coerced, as numpy refuses ``array[1.5]``.
"""

from __future__ import annotations

import operator
from typing import Any

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
    try:
        if isinstance(value, bool):
            raise TypeError
        index = operator.index(value)
    except TypeError:
        raise InputError(
            f"{name} {value!r} is not an integer index (got {type(value).__name__}); pass an int in {valid}"
        ) from None
    if not -size <= index < size:
        raise InputError(f"{name} {index} does not exist; this {owner} has {name}s {valid}")
    return index % size
