"""Input checks shared by the analyzers: every failure is an :class:`InputError` that says
what was wrong and how to fix it.

>>> as_positions([[[0, 1, 2]]]).dtype  # ints are accepted and cast
dtype('float64')
>>> def refused(check, *args, **kwargs):
...     try:
...         check(*args, **kwargs)
...     except InputError as error:
...         print(error)
>>> refused(as_positions, [[0.0, 1.0]])
positions has rank 2 (shape (1, 2)), expected rank 3; positions must have shape (n_layers, n_heads, T); ...
>>> refused(as_positions, [[[True, False]]])
positions is a bool array; positions are real numbers (e.g. trace.positions)
>>> refused(as_float_array, [0.5, float("inf"), float("nan")], "z")  # the first bad index is named
z contains inf at index (1,); drop or mask those tokens first
>>> as_float_array([1.0, float("nan")], "z", allow_nan=True)
array([ 1., nan])
>>> refused(as_char_spans, [[0, 1.5]])  # never truncated to ints
token_char_spans must hold ints (character indices); got dtype float64
>>> refused(as_list, "abc", "texts", '["a"]'), as_list(("a", "b"), "texts", '["a"]')
texts is a single str; pass a list, e.g. ["a"]
(None, ['a', 'b'])
>>> refused(check_same_length, "positions", 3, "tokens", 4)
positions covers 3 tokens but tokens covers 4; pass arrays computed from the same tokens
"""

from __future__ import annotations

import numpy as np

from repo_lens.errors import InputError

POSITIONS_SHAPE_HINT = (
    "positions must have shape (n_layers, n_heads, T); for one head's positions z of shape (T,) "
    "pass z[None, None], for (n_heads, T) pass z[None]"
)


def as_float_array(
    value: object,
    name: str,
    *,
    ndim: int | None = None,
    min_ndim: int = 1,
    allow_nan: bool = False,
    shape_hint: str = "",
    cast: bool = True,
    check_finite: bool = True,
) -> np.ndarray:
    """``value`` as an array (float64 if ``cast``) after checking dtype, rank, emptiness and finiteness."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise InputError(f"{name} is not a rectangular numeric array ({exc}); pass a numpy array") from exc
    if array.dtype.kind not in "biuf":
        raise InputError(
            f"{name} must be a numeric array; got dtype {array.dtype}. Convert it with np.asarray(..., dtype=float)"
        )
    if ndim is not None and array.ndim != ndim:
        hint = shape_hint or f"pass an array of rank {ndim}"
        raise InputError(f"{name} has rank {array.ndim} (shape {array.shape}), expected rank {ndim}; {hint}")
    if array.ndim < min_ndim:
        hint = shape_hint or f"pass an array of rank >= {min_ndim}"
        raise InputError(f"{name} has rank {array.ndim} (shape {array.shape}), expected rank >= {min_ndim}; {hint}")
    if array.size == 0:
        raise InputError(f"{name} is empty (shape {array.shape}); pass at least one token")
    if cast:
        array = array.astype(np.float64, copy=False)
    if check_finite:
        raise_if_nonfinite(array, name, allow_nan=allow_nan)
    return array


def raise_if_nonfinite(array: np.ndarray, name: str, *, allow_nan: bool = False) -> None:
    """Raise for inf (and, unless allowed, NaN) entries, naming the first offending index."""
    if array.dtype.kind != "f":
        return
    if allow_nan:
        if not np.isinf(array).any():
            return
    elif np.isfinite(array).all():
        return
    bad_inf = np.isinf(array)
    if bad_inf.any():
        where = tuple(int(i) for i in np.argwhere(bad_inf)[0])
        raise InputError(f"{name} contains inf at index {where}; drop or mask those tokens first")
    where = tuple(int(i) for i in np.argwhere(np.isnan(array))[0])
    raise InputError(
        f"{name} contains NaN at index {where}; drop or mask those tokens first "
        "(e.g. positions[..., keep] with a boolean mask keep)"
    )


def as_positions(
    positions: object, name: str = "positions", *, cast: bool = True, check_finite: bool = True
) -> np.ndarray:
    """Check the (n_layers, n_heads, T) positions contract; return float64 if ``cast``."""
    refuse_bool(positions, name)
    return as_float_array(
        positions, name, ndim=3, shape_hint=POSITIONS_SHAPE_HINT, cast=cast, check_finite=check_finite
    )


def check_same_length(name_a: str, length_a: int, name_b: str, length_b: int) -> None:
    """Raise when two token axes disagree."""
    if length_a != length_b:
        raise InputError(
            f"{name_a} covers {length_a} tokens but {name_b} covers {length_b}; "
            "pass arrays computed from the same tokens"
        )


def as_list(value: object, name: str, example: str) -> list:
    """``value`` as a list, refusing one str and anything that is not iterable (None, a number)."""
    if isinstance(value, (str, bytes)):
        raise InputError(f"{name} is a single {type(value).__name__}; pass a list, e.g. {example}")
    try:
        return list(value)  # type: ignore[call-overload]
    except TypeError:
        raise InputError(f"{name} must be a list, not {type(value).__name__}; e.g. {example}") from None


def as_char_spans(value: object, name: str = "token_char_spans") -> np.ndarray:
    """(T, 2) int64 (start, end) character spans; fractional or non-numeric spans are refused, never truncated."""
    try:
        spans = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{name} must be (start, end) int pairs, one per token ({exc})") from None
    if spans.ndim != 2 or spans.shape[1] != 2 or spans.shape[0] == 0:
        raise InputError(f"{name} has shape {spans.shape}; pass one (start, end) char span per token, shape (T, 2)")
    if spans.dtype.kind not in "iu":
        raise InputError(f"{name} must hold ints (character indices); got dtype {spans.dtype}")
    return spans.astype(np.int64)


def refuse_bool(positions: object, name: str = "positions") -> None:
    """Positions are real numbers: a bool array is a mask passed by mistake (ragged input is left to
    :func:`as_float_array`, which names it)."""
    try:
        is_bool = np.asarray(positions).dtype == bool
    except (ValueError, TypeError):
        return
    if is_bool:
        raise InputError(f"{name} is a bool array; positions are real numbers (e.g. trace.positions)")
