"""Range and chunk-pattern statistics of assigned positions (RePo §5.2, Fig. 2 and 3).

All functions take ``positions`` of shape (n_layers, n_heads, T): the position each head assigns
each token (RoPE: 0..T-1, NoPE: a constant, RePo: the learned z).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

import numpy as np

from repo_lens.analysis._checks import as_positions, raise_if_nonfinite
from repo_lens.errors import InputError

PATTERN_LABELS: tuple[str, str, str] = ("constant", "mono", "hybrid")
_BLOCK = 8192  # chunks classified per vectorised step (keeps temporaries in cache)


def range_stats(positions: np.ndarray) -> np.ndarray:
    """Distance d = max_t z - min_t z per layer and head (RePo Fig. 2), shape (L, H).

    Example:
        >>> import numpy as np
        >>> z = np.array([[[0.0, 1.0, 2.0, 3.0], [5.0, 5.0, 5.0, 5.0]]])  # 1 layer, 2 heads
        >>> range_stats(z)
        array([[3., 0.]])
    """
    z = as_positions(positions, check_finite=False, cast=False)
    high, low = z.max(axis=-1), z.min(axis=-1)  # exact in any dtype; NaN and inf propagate
    if not (np.isfinite(high).all() and np.isfinite(low).all()):
        raise_if_nonfinite(z, "positions")
    with np.errstate(over="ignore"):  # a spread beyond the float64 range is inf, as it should be
        return high.astype(np.float64) - low.astype(np.float64)


def _check_chunking(size: object, eps: object, n_tokens: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
        raise InputError(f"size must be an int number of tokens per chunk; got {size!r}")
    if size < 2:
        raise InputError(f"chunk size {size} < 2: a pattern needs at least two tokens; pass size >= 2 (RePo uses 16)")
    if isinstance(eps, bool) or not isinstance(eps, Real) or not np.isfinite(float(eps)) or eps < 0:
        raise InputError(f"eps must be a finite number >= 0; got {eps!r} (RePo uses 0.2)")
    n_chunks = n_tokens // int(size)
    if n_chunks == 0:
        raise InputError(
            f"T={n_tokens} tokens is shorter than one chunk of size {size}; pass size <= {n_tokens} or a longer text"
        )
    return n_chunks


def chunk_pattern_codes(positions: np.ndarray, size: int = 16, eps: float = 0.2) -> np.ndarray:
    """Like :func:`chunk_patterns` but as int8 codes indexing :data:`PATTERN_LABELS`
    (0 constant, 1 mono, 2 hybrid): cheaper to store and count.

    Example:
        >>> import numpy as np
        >>> chunk_pattern_codes(np.array([[[1.0, 1.1, 0.0, 1.0, 3.0, 1.0]]]), size=2)
        array([[[0, 1, 1]]], dtype=int8)
    """
    z = as_positions(positions, cast=False)
    n_chunks = _check_chunking(size, eps, z.shape[-1])
    rows = z[..., : n_chunks * size].reshape(-1, size)  # one row per chunk, all heads
    codes = np.empty(rows.shape[0], dtype=np.int8)
    # Blocks of chunks, so the temporaries stay in cache (a loop over blocks, not chunks).
    for start in range(0, rows.shape[0], _BLOCK):
        codes[start:start + _BLOCK] = _codes_of_rows(rows[start:start + _BLOCK], float(eps))
    return codes.reshape(*z.shape[:-1], n_chunks)


def _codes_of_rows(rows: np.ndarray, eps: float) -> np.ndarray:
    # Chunk offsets on the leading axis: every reduction is then elementwise across the chunks
    # (reducing a short last axis pays numpy's per-row overhead).
    cols: np.ndarray = np.empty(rows.shape[::-1], dtype=np.float64)
    np.copyto(cols, rows.T)
    with np.errstate(over="ignore"):
        mean = np.add.reduce(cols, axis=0) / cols.shape[0]
    overflowed = ~np.isfinite(mean)
    if overflowed.any():  # values near ±1.8e308: the mean is the first value plus the mean of the differences
        first = cols[0, overflowed]
        with np.errstate(over="ignore"):
            mean[overflowed] = first + np.add.reduce(cols[:, overflowed] - first, axis=0) / cols.shape[0]
    # |z - a| <= eps for every z  <=>  max - a <= eps and a - min <= eps (exactly, in floats too).
    with np.errstate(over="ignore"):  # an overflowing range is inf: far from constant, as it should be
        constant = (cols.max(axis=0) - mean <= eps) & (mean - cols.min(axis=0) <= eps)
    later, earlier = cols[1:], cols[:-1]
    mono = (later > earlier).all(axis=0) | (later < earlier).all(axis=0)
    codes = np.full(constant.shape, 2, dtype=np.int8)
    codes[mono] = 1
    codes[constant] = 0  # constant takes precedence over mono
    return codes


def chunk_patterns(positions: np.ndarray, size: int = 16, eps: float = 0.2) -> np.ndarray:
    """Pattern of each non-overlapping chunk of ``size`` tokens (RePo Fig. 3), str array (L, H, n_chunks).

    The trailing partial chunk is dropped. With a the chunk mean, a chunk is ``"constant"`` if
    |z - a| <= eps for every z in it; else ``"mono"`` if it is strictly increasing or strictly
    decreasing; else ``"hybrid"``. Constant takes precedence over mono. RePo uses size=16, eps=0.2.
    Computed in float64 (a is the left-to-right sum over the chunk divided by ``size``), so float32
    positions are classified exactly as their float64 values.

    Example:
        >>> import numpy as np
        >>> z = np.array([[[1.0, 1.1, 1.0, 1.1, 0.0, 1.0, 2.0, 3.0, 0.0, 2.0, 1.0, 3.0, 9.0]]])
        >>> chunk_patterns(z, size=4).tolist()
        [[['constant', 'mono', 'hybrid']]]
    """
    return np.take(np.asarray(PATTERN_LABELS), chunk_pattern_codes(positions, size, eps))


@dataclass(frozen=True)
class PatternFractions:
    """Shares of each pattern; the last axis follows ``labels`` (constant, mono, hybrid)."""

    labels: tuple[str, ...]
    per_head: np.ndarray  # (L, H, 3)
    per_layer: np.ndarray  # (L, 3)
    overall: np.ndarray  # (3,)
    n_chunks: int  # chunks per head


def pattern_fractions(patterns: np.ndarray) -> PatternFractions:
    """Share of constant / mono / hybrid chunks per head, per layer and overall.

    Example:
        >>> import numpy as np
        >>> p = np.array([[["constant", "hybrid"], ["mono", "hybrid"]]])
        >>> fr = pattern_fractions(p)
        >>> fr.labels, fr.overall.tolist(), fr.per_layer.tolist()
        (('constant', 'mono', 'hybrid'), [0.25, 0.25, 0.5], [[0.25, 0.25, 0.5]])
    """
    p = np.asarray(patterns)
    if p.ndim != 3:
        raise InputError(
            f"patterns has rank {p.ndim} (shape {p.shape}), expected (n_layers, n_heads, n_chunks) "
            "as returned by chunk_patterns"
        )
    if p.size == 0:
        raise InputError(f"patterns is empty (shape {p.shape}); pass chunk_patterns of at least one chunk")
    if p.dtype.kind not in "US":
        raise InputError(f"patterns must be a str array from chunk_patterns; got dtype {p.dtype}")
    onehot = np.stack([p == label for label in PATTERN_LABELS], axis=-1)
    unknown = ~onehot.any(axis=-1)
    if unknown.any():
        bad = str(p[unknown][0])
        raise InputError(f"unknown pattern label {bad!r}; labels must be one of {PATTERN_LABELS}")
    per_head = onehot.mean(axis=2)
    return PatternFractions(
        labels=PATTERN_LABELS,
        per_head=per_head,
        per_layer=per_head.mean(axis=1),
        overall=onehot.reshape(-1, len(PATTERN_LABELS)).mean(axis=0),
        n_chunks=p.shape[2],
    )


@dataclass(frozen=True)
class HeadSummary:
    """Per layer and head (each (L, H)) summaries of the positions along the tokens."""

    mean: np.ndarray
    std: np.ndarray  # population std (ddof=0)
    negative_share: np.ndarray  # share of tokens with z < 0
    increasing_share: np.ndarray  # share of the T-1 steps with z_t > z_{t-1}
    decreasing_share: np.ndarray  # share of the T-1 steps with z_t < z_{t-1}
    range: np.ndarray  # max - min, as range_stats


def head_summary(positions: np.ndarray) -> HeadSummary:
    """Mean, std (ddof=0), share of negative positions, share of strictly increasing and of
    strictly decreasing steps (over the T-1 consecutive pairs), and range, per layer and head.
    RoPE gives increasing_share 1, NoPE 0 for both step shares. Needs T >= 2.

    Example:
        >>> import numpy as np
        >>> s = head_summary(np.array([[[-1.0, 0.0, 2.0, 1.0, 3.0]]]))
        >>> s.mean.tolist(), s.negative_share.tolist(), s.increasing_share.tolist()
        ([[1.0]], [[0.2]], [[0.75]])
    """
    z = as_positions(positions)
    if z.shape[-1] < 2:
        raise InputError(f"head_summary needs T >= 2 tokens to count steps; got T={z.shape[-1]}")
    later, earlier = z[..., 1:], z[..., :-1]
    return HeadSummary(
        mean=z.mean(axis=-1),
        std=z.std(axis=-1),
        negative_share=(z < 0).mean(axis=-1),
        increasing_share=(later > earlier).mean(axis=-1),
        decreasing_share=(later < earlier).mean(axis=-1),
        range=z.max(axis=-1) - z.min(axis=-1),
    )
