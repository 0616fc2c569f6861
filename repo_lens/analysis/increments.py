"""Per-token position increments and their statistics by token category (the learned-increments post)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from repo_lens.analysis._checks import as_float_array, check_same_length, refuse_bool
from repo_lens.analysis.categories import BYTE_CATEGORIES, SUBWORD_CATEGORIES
from repo_lens.errors import InputError
from repo_lens.model.registry import mechanism_traits


def position_increments(positions: np.ndarray, origin: float = 0.0) -> np.ndarray:
    """Increments z_t - z_{t-1} along the last (token) axis, same shape as ``positions``.

    The first token's increment is z_0 - ``origin``. With the default ``origin=0`` this inverts a
    cumulative sum exactly as the learned-increments post builds positions (z = cumsum(delta) gives back delta,
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


def trace_increments(trace) -> np.ndarray:
    """The increment of every layer, head and token of ``trace``: (L, H, T) float64.

    This is the one definition the word-boundary AUC (in the app and in ``analyze --study
    boundaries``), the increment tables and the figures use. Per layer:

    - where the layer's mechanism sums increments into its positions and the trace stores them
      (``trace.extras["increments"]``, written by :meth:`repo_lens.Lens.trace`), the increment of
      token t is what the mechanism adds at token t: δ_t of learned increments, −log f_t of FoX,
      the last token's gate on t for CoPE, ω_t of GRAPE-M, the head's slope for ALiBi.
      For an inclusive sum (z_t = Σ_{s≤t} δ_s) that is z_t − z_{t−1}; for an exclusive one
      (GRAPE-M, ALiBi: z_t = Σ_{s<t} ω_s) it is the step to the next token, z_{t+1} − z_t, so it
      is *not* the difference of consecutive positions. ``trace.meta["increments"]["definition"]``
      says which each layer's mechanism is. The stored values are also exact, where differences of
      a long float32 running sum lose digits.
    - elsewhere (RoPE, NoPE, RePo layers, traces without stored increments), the difference of
      consecutive positions z_t − z_{t−1}, NaN at the first token (it has no predecessor).

    Non-finite positions are not refused (a trace may hold them; its ``meta`` flags them): they
    give non-finite increments, which the analyzers that need finite values refuse by name.

    ``trace``: a :class:`repo_lens.Trace` (anything with ``positions`` (L, H, T), ``layer_kinds`` and
    ``extras``).

    Example:
        >>> import numpy as np
        >>> from repo_lens import Trace
        >>> z = np.array([[[0, 1, 2, 3]], [[0.0, 0.5, 1.5, 1.75]]], dtype=np.float32)
        >>> t = Trace(tokens=list("abcd"), token_ids=[97, 98, 99, 100], positions=z, layer_kinds=["rope", "repo"])
        >>> trace_increments(t)
        array([[[ nan, 1.  , 1.  , 1.  ]],
        <BLANKLINE>
               [[ nan, 0.5 , 1.  , 0.25]]])
    """
    positions = np.asarray(trace.positions, dtype=np.float64)
    if positions.ndim != 3:
        raise InputError(f"positions has shape {positions.shape}; a trace holds (n_layers, n_heads, T)")
    increments = np.diff(positions, axis=-1, prepend=np.nan)  # NaN or infinite positions give such increments
    stored = (getattr(trace, "extras", None) or {}).get("increments")
    if stored is None:
        return increments
    stored = np.asarray(stored, dtype=np.float64)
    if stored.shape != positions.shape:
        raise InputError(f"extras['increments'] has shape {stored.shape} but positions {positions.shape}; "
                         "a trace stores one increment per layer, head and token")
    for layer, kind in enumerate(trace.layer_kinds):
        if mechanism_traits(kind).increments is not None:
            increments[layer] = stored[layer]
    return increments


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
    """Mean, median and count of increments per token category, per head and overall (the learned-increments post's
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
