"""Attention look-back distance and its correlation with position increments (the learned-increments post)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.stats import pearsonr, rankdata

from repo_lens.analysis._checks import as_float_array
from repo_lens.errors import InputError


def attention_lookback(pattern: np.ndarray, query_index: np.ndarray | None = None) -> np.ndarray:
    """Expected look-back distance sum_j p_ij (i - j) of each query row, shape ``pattern.shape[:-1]``.

    ``pattern`` (..., Q, K) holds attention probabilities (e.g. (H, T, T), or (L, H, T, T)).
    Query row r sits at token ``query_index[r]`` (default: r, for a square pattern); keys are
    tokens 0..K-1. Rows are renormalised to sum to 1 (bf16 rounding), so they must be
    non-negative with a positive sum.

    Example:
        >>> import numpy as np
        >>> p = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])
        >>> attention_lookback(p)
        array([0.  , 0.5 , 0.25])
        >>> attention_lookback(p[2:], query_index=[2])
        array([0.25])
    """
    p = as_float_array(pattern, "pattern", min_ndim=2, shape_hint="pass attention probabilities (..., Q, K)")
    n_rows, n_keys = p.shape[-2:]
    if query_index is None:
        if n_rows != n_keys:
            raise InputError(
                f"pattern has {n_rows} query rows and {n_keys} keys; for a subset of rows pass "
                "query_index (the token index of each row)"
            )
        queries = np.arange(n_rows)
    else:
        queries = np.asarray(query_index)
        if queries.shape != (n_rows,) or queries.dtype.kind not in "iu":
            raise InputError(f"query_index must be {n_rows} ints, one per query row; got {queries.dtype} {queries.shape}")
        if queries.min() < 0 or queries.max() >= n_keys:
            raise InputError(f"query_index values must lie in 0..{n_keys - 1} (the key tokens)")
    if (p < 0).any():
        raise InputError("pattern has negative entries; pass attention probabilities (after softmax)")
    total = p.sum(axis=-1)
    if (total <= 0).any():
        raise InputError("a query row of pattern sums to 0; pass attention probabilities (after softmax)")
    distance = queries[:, None] - np.arange(n_keys)[None, :]
    return (p * distance).sum(axis=-1) / total


@dataclass(frozen=True)
class LookbackCorrelation:
    """Per-head correlations (shape of the inputs' leading axes, e.g. (L, H)); NaN where undefined
    (fewer than 3 common finite tokens, or a constant series such as RoPE's increments)."""

    pearson: np.ndarray
    spearman: np.ndarray
    n: np.ndarray  # tokens used per head


def _correlations(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pearson and Spearman r along the last axis over the tokens in ``mask``, from
    ``scipy.stats.pearsonr`` (Spearman's rho is Pearson's r of the average ranks, as
    ``scipy.stats.spearmanr`` defines it); heads sharing a mask go in one vectorised call.
    NaN for fewer than 3 tokens or a constant series."""
    lead, n_tokens = x.shape[:-1], x.shape[-1]
    x2, y2, m2 = (a.reshape(-1, n_tokens) for a in (x, y, mask))
    pearson = np.full(x2.shape[0], np.nan)
    spearman = np.full(x2.shape[0], np.nan)
    heads_by_mask: dict[bytes, list[int]] = {}
    for row, packed in enumerate(np.packbits(m2, axis=-1)):
        heads_by_mask.setdefault(packed.tobytes(), []).append(row)
    for heads in heads_by_mask.values():
        rows, pattern = np.asarray(heads), m2[heads[0]]
        if pattern.sum() < 3:
            continue
        xs, ys = x2[rows][:, pattern], y2[rows][:, pattern]
        varying = (np.ptp(xs, axis=-1) > 0) & (np.ptp(ys, axis=-1) > 0)
        rows, xs, ys = rows[varying], xs[varying], ys[varying]
        if rows.size:
            pearson[rows] = pearsonr(xs, ys, axis=-1).statistic
            spearman[rows] = pearsonr(rankdata(xs, axis=-1), rankdata(ys, axis=-1), axis=-1).statistic
    return pearson.reshape(lead), spearman.reshape(lead)


def lookback_correlation(increments: np.ndarray, lookback: np.ndarray) -> LookbackCorrelation:
    """Pearson and Spearman correlation, per head, between position increments and attention
    look-back distance over tokens. Inputs are (..., T) of equal shape (e.g. (L, H, T)); tokens
    where either is NaN (e.g. the first increment with ``origin=nan``) are skipped.

    Example:
        >>> import numpy as np
        >>> inc = np.array([[[1.0, 2.0, 3.0, 4.0]]])
        >>> c = lookback_correlation(inc, np.array([[[0.0, 1.0, 4.0, 9.0]]]))
        >>> round(float(c.pearson[0, 0]), 3), float(c.spearman[0, 0])
        (0.958, 1.0)
    """
    x = as_float_array(increments, "increments", allow_nan=True, shape_hint="pass shape (..., T), e.g. (L, H, T)")
    y = as_float_array(lookback, "lookback", allow_nan=True, shape_hint="pass shape (..., T), e.g. (L, H, T)")
    if x.shape != y.shape:
        raise InputError(f"increments has shape {x.shape} but lookback has {y.shape}; pass arrays of the same (..., T)")
    mask = ~np.isnan(x) & ~np.isnan(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's near-constant input warning
        pearson, spearman = _correlations(x, y, mask)
    return LookbackCorrelation(pearson=pearson, spearman=spearman, n=mask.sum(axis=-1))
