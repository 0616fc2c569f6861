"""Per-token position increments and their statistics by token category ("Learned position increments",
Brendan Long).

:func:`increments_by_category` (mean, median, count over our partitions :func:`byte_categories` /
:func:`subword_categories`) serves any text and tokenizer. :func:`byte_category_table` is the post's own
per-byte table (min, max, mean over the script's byte sets), and :func:`char_increments` /
:func:`char_positions` the data of its spacing plot, each computed as the post's scripts compute them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from repo_lens.analysis._checks import as_float_array, check_same_length, refuse_bool
from repo_lens.analysis.categories import BYTE_CATEGORIES, POST_BYTE_CATEGORIES, SUBWORD_CATEGORIES
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


@dataclass(frozen=True)
class ByteCategoryTable:
    """Increments of the tokens in each byte category: ``min``/``max``/``mean``/``count`` have shape
    (*lead, C), the last axis following ``labels`` (lead: the increments' leading shape, e.g. (L,))."""

    labels: tuple[str, ...]
    min: np.ndarray
    max: np.ndarray
    mean: np.ndarray
    count: np.ndarray

    def rows(self, index: int | tuple[int, ...] = ()) -> dict[str, dict[str, float]]:
        """{category: {"min", "max", "mean", "count"}} at one leading index (e.g. a layer)."""
        return {label: {"min": float(self.min[index][i]), "max": float(self.max[index][i]),
                        "mean": float(self.mean[index][i]), "count": int(self.count[index][i])}
                for i, label in enumerate(self.labels)}


def byte_category_table(increments: np.ndarray, token_ids: Sequence[int] | np.ndarray,
                        categories: Mapping[str, Sequence[int]] = POST_BYTE_CATEGORIES) -> ByteCategoryTable:
    """Min, max and mean increment of the tokens whose id lies in each category (the learned-increments post's
    per-byte table, "Learned position increments", Brendan Long).

    The post's script runs the embedding-level DeltaMLP over all 257 byte ids and prints, per category of
    :data:`POST_BYTE_CATEGORIES`, the min, max and mean δ: that is ``byte_category_table(delta, range(257))``
    with ``delta`` of shape (257,) or (L, 257) (δ of every byte per layer). Passing the increments of
    held-out text with its byte ids instead gives the same table over every byte *in context*.
    ``increments``: (..., T), finite; ``token_ids``: (T,) ints. Ids in no category are left out; a
    category with no token has NaN min/max/mean and count 0.

    Example:
        >>> import numpy as np
        >>> table = byte_category_table(np.array([0.7, 0.9, 1.2, 2.0]), [ord("a"), ord("z"), ord("Q"), 256])
        >>> table.rows()["English within-word (a-z)"], table.rows()["EOS"]["mean"]
        ({'min': 0.7, 'max': 0.9, 'mean': 0.8, 'count': 2}, 2.0)
    """
    inc = as_float_array(increments, "increments", shape_hint="pass increments of shape (..., T)")
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise InputError(f"token_ids must be a 1-D array of ints, one per token; got {ids.dtype} of shape {ids.shape}")
    check_same_length("increments", inc.shape[-1], "token_ids", ids.shape[0])
    if not isinstance(categories, Mapping) or not categories:
        raise InputError("categories must be a non-empty {name: byte ids} mapping, e.g. POST_BYTE_CATEGORIES")
    lows, highs, means, counts = [], [], [], []
    for name, members in categories.items():
        chosen = inc[..., np.isin(ids, np.asarray(list(members), dtype=np.int64))]
        empty = chosen.shape[-1] == 0
        lows.append(np.full(inc.shape[:-1], np.nan) if empty else chosen.min(axis=-1))
        highs.append(np.full(inc.shape[:-1], np.nan) if empty else chosen.max(axis=-1))
        means.append(np.full(inc.shape[:-1], np.nan) if empty else chosen.mean(axis=-1))
        counts.append(np.full(inc.shape[:-1], chosen.shape[-1], dtype=np.int64))
    return ByteCategoryTable(labels=tuple(categories), min=np.stack(lows, axis=-1), max=np.stack(highs, axis=-1),
                             mean=np.stack(means, axis=-1), count=np.stack(counts, axis=-1))


def char_increments(byte_increments: np.ndarray, text: str,
                    scale: Literal["per-row", "shared"] = "per-row") -> np.ndarray:
    """Each character's increment, the sum of its UTF-8 bytes' increments, normalised as the post's spacing
    plot does ("Learned position increments", Brendan Long, ``plot_increments.py``).

    ``byte_increments``: (..., n_bytes) δ of the bytes of ``text`` (leading axes are rows, e.g. layers),
    aligned to ``text.encode("utf-8")`` — the script prepends the EOS byte when it runs the model and drops
    that column before this step. ``scale="per-row"`` divides each row by its own mean (every row averages
    1: spacing relative to RoPE's +1); ``"shared"`` divides every row by one mean over all rows, keeping
    the layers' relative magnitudes. Returns (..., n_chars). Place the characters with
    :func:`char_positions`.

    Example:
        >>> import numpy as np
        >>> char_increments(np.array([1.0, 0.5, 0.5, 2.0]), "aé!")   # é is two bytes
        array([0.75, 0.75, 1.5 ])
        >>> char_increments(np.array([[1.0, 1.0], [3.0, 3.0]]), "ab", scale="shared")
        array([[0.5, 0.5],
               [1.5, 1.5]])
    """
    if not isinstance(text, str) or not text:
        raise InputError("text must be a non-empty str; pass the text whose bytes the increments belong to")
    try:
        widths = [len(char.encode("utf-8")) for char in text]
    except UnicodeEncodeError as error:
        raise InputError(f"text cannot be encoded as UTF-8 ({error.reason} at character {error.start}); "
                         "pass the text the byte model read") from None
    inc = as_float_array(byte_increments, "byte_increments", shape_hint="pass increments of shape (..., n_bytes)")
    check_same_length("byte_increments", inc.shape[-1], "text's UTF-8 bytes", sum(widths))
    if scale not in ("per-row", "shared"):
        raise InputError(f"scale must be 'per-row' or 'shared', got {scale!r}")
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
    per_char = np.add.reduceat(inc, starts, axis=-1)
    norm = per_char.mean() if scale == "shared" else per_char.mean(axis=-1, keepdims=True)
    if np.any(np.asarray(norm) == 0):
        raise InputError("the mean increment of a row is 0, so it cannot be normalised; pass the positive δ "
                         "of a learned-increments layer")
    return per_char / norm


def char_positions(increments: np.ndarray) -> np.ndarray:
    """Where the post's spacing plot places each character: the running sum of the (normalised) character
    increments, shifted so the first character sits at 0 — the gap before a character is its own increment.

    Example:
        >>> import numpy as np
        >>> char_positions(np.array([0.75, 0.75, 1.5]))
        array([0.  , 0.75, 2.25])
    """
    inc = as_float_array(increments, "increments", shape_hint="pass character increments of shape (..., n_chars)")
    return np.cumsum(inc, axis=-1) - inc[..., :1]
