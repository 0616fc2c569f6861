"""Pick layers and heads out of a (n_layers, n_heads, ...) array with checked indices."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np

from repo_lens.errors import InputError
from repo_lens.validation import check_index


def _indices(chosen: int | Sequence[int] | None, count: int, what: str) -> np.ndarray:
    if chosen is None:
        return np.arange(count)
    one = isinstance(chosen, (str, bytes)) or not isinstance(chosen, Iterable) or getattr(chosen, "ndim", 1) == 0
    values = [chosen] if one else list(cast(Iterable[int], chosen))
    if not values:
        raise InputError(f"empty {what} selection; pass at least one {what} index or None for all")
    return np.asarray([check_index(value, count, what, owner="array") for value in values], dtype=np.intp)


def select_heads(
    array: np.ndarray, layers: int | Sequence[int] | None = None, heads: int | Sequence[int] | None = None
) -> np.ndarray:
    """Sub-array of the chosen layers and heads, keeping rank (an int selects a length-1 axis).
    Works for anything shaped (n_layers, n_heads, ...), e.g. positions or range_stats output.

    Example:
        >>> import numpy as np
        >>> z = np.arange(2 * 3 * 4, dtype=float).reshape(2, 3, 4)
        >>> select_heads(z, layers=-1, heads=[0, 2]).shape
        (1, 2, 4)
    """
    a = np.asarray(array)
    if a.ndim < 2:
        raise InputError(f"array has rank {a.ndim} (shape {a.shape}); expected (n_layers, n_heads, ...)")
    rows = _indices(layers, a.shape[0], "layer")
    cols = _indices(heads, a.shape[1], "head")
    return a[rows][:, cols]
