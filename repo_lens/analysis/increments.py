"""Per-token position increments and their statistics by token category (seeds/002)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from repo_lens.analysis._checks import as_float_array, check_same_length, refuse_bool
from repo_lens.analysis.categories import BYTE_CATEGORIES, SUBWORD_CATEGORIES
from repo_lens.errors import InputError


def position_increments(positions: np.ndarray, origin: float = 0.0) -> np.ndarray:
    """Increments z_t - z_{t-1} along the last (token) axis, same shape as ``positions``.

    The first token's increment is z_0 - ``origin``. With the default ``origin=0`` this inverts a
    cumulative sum exactly as seeds/002 builds positions (z = cumsum(delta) gives back delta,
    including the first token's delta). For mechanisms whose first position is arbitrary (RePo)
    pass ``origin=np.nan`` to mark it undefined; the category and correlation analyzers skip NaN.

    Example:
        >>> import numpy as np
        >>> position_increments(np.cumsum([1.0, 0.5, 2.0]))
        array([1. , 0.5, 2. ])
        >>> position_increments(np.array([3.0, 4.0]), origin=np.nan)
        array([nan,  1.])
    """
    refuse_bool(positions)
    z = as_float_array(positions, "positions", shape_hint="pass positions of shape (..., T)")
    if isinstance(origin, (bool, np.bool_, str, bytes)) or np.ndim(origin) != 0:
        raise InputError(f"origin must be one real number (0.0, or np.nan for an undefined first increment); "
                         f"got {origin!r:.60}")
    try:
        origin = float(origin)
    except (TypeError, ValueError):
        raise InputError(f"origin must be one real number (0.0, or np.nan); got {origin!r:.60}") from None
    if np.isinf(origin):
        raise InputError(f"origin must be finite or NaN; got {origin}")
    return np.diff(z, axis=-1, prepend=origin)


def _category_order(present: np.ndarray) -> tuple[str, ...]:
    known = [c for c in (*BYTE_CATEGORIES, *SUBWORD_CATEGORIES) if c in set(present)]
    seen = set(known)
    return tuple(dict.fromkeys(known)) + tuple(sorted(c for c in set(present) if c not in seen))


@dataclass(frozen=True)
class CategoryIncrements:
    """Increment statistics by category; the last axis of every array follows ``labels``.

    ``mean``/``median``/``count`` have shape (*lead, C) where lead is the increments' leading
    shape (e.g. (L, H), or () for a 1-D input); ``overall_*`` (C,) pool every layer, head and token.
    NaN increments are skipped; a category with no finite increment in a head has NaN there.
    """

    labels: tuple[str, ...]
    mean: np.ndarray
    median: np.ndarray
    count: np.ndarray
    overall_mean: np.ndarray
    overall_median: np.ndarray
    overall_count: np.ndarray

    def as_dict(self) -> dict[str, dict[str, float]]:
        """{category: {"mean", "median", "count"}} of the overall statistics."""
        return {
            label: {
                "mean": float(self.overall_mean[i]),
                "median": float(self.overall_median[i]),
                "count": int(self.overall_count[i]),
            }
            for i, label in enumerate(self.labels)
        }


def increments_by_category(increments: np.ndarray, categories: np.ndarray) -> CategoryIncrements:
    """Mean, median and count of increments per token category, per head and overall (seeds/002's
    table of learned increment by byte category).

    ``increments`` is (..., T) (e.g. (L, H, T) from :func:`position_increments`, or a 1-D delta);
    ``categories`` is (T,) labels, e.g. from :func:`byte_categories` or :func:`subword_categories`.
    Categories are ordered as in BYTE_CATEGORIES / SUBWORD_CATEGORIES, unknown labels after, sorted.

    Example:
        >>> import numpy as np
        >>> r = increments_by_category(np.array([0.8, 1.0, 0.6, 2.0]), ["lowercase", "space", "lowercase", "newline"])
        >>> r.labels, r.mean.tolist(), r.count.tolist()
        (('lowercase', 'space', 'newline'), [0.7, 1.0, 2.0], [2, 1, 1])
    """
    inc = as_float_array(increments, "increments", allow_nan=True, shape_hint="pass increments of shape (..., T)")
    cats = np.asarray(categories)
    if cats.ndim != 1:
        raise InputError(f"categories has shape {cats.shape}; pass one label per token, shape (T,)")
    if cats.dtype.kind not in "US":
        raise InputError(f"categories must be str labels; got dtype {cats.dtype}")
    check_same_length("increments", inc.shape[-1], "categories", cats.shape[0])
    labels = _category_order(np.unique(cats))
    finite = ~np.isnan(inc)
    means, medians, counts, all_means, all_medians, all_counts = [], [], [], [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN, as documented
        for label in labels:  # one pass per category (about ten), vectorised over heads and tokens
            values = inc[..., cats == label]
            counts.append(finite[..., cats == label].sum(axis=-1))
            means.append(np.nanmean(values, axis=-1))
            medians.append(np.nanmedian(values, axis=-1))
            pooled = values[~np.isnan(values)]
            all_counts.append(pooled.size)
            all_means.append(pooled.mean() if pooled.size else np.nan)
            all_medians.append(np.median(pooled) if pooled.size else np.nan)
    return CategoryIncrements(
        labels=labels,
        mean=np.stack(means, axis=-1),
        median=np.stack(medians, axis=-1),
        count=np.stack(counts, axis=-1),
        overall_mean=np.asarray(all_means, dtype=float),
        overall_median=np.asarray(all_medians, dtype=float),
        overall_count=np.asarray(all_counts, dtype=np.int64),
    )
