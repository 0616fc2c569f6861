"""Relative drift and class tests over the learned units of a model (its heads, or its layers), each unit judged
against its own mean ("Learned position increments", Brendan Long: "compare relative drift, not absolute δ").

A model's units run at speeds of their own (one head's increments average 0.6, another's 1.5). Class means of
the absolute increment averaged over units mix those speeds into the classes wherever the classes are not
spread evenly over the units, and drifts of opposite sign in different units cancel in them. Here every
quantity is computed inside a unit first:

- :func:`unit_relative_drift` — each unit's :func:`~repo_lens.analysis.relative_drift` (δ − the unit's mean
  δ, with bootstrap intervals), also in units of the unit's own standard deviation; across units, each
  category's median drift with a percentile bootstrap interval over units, and the share of units in which
  the category drifts up.
- :func:`unit_category_test` — each unit's label-permutation test of
  :func:`~repo_lens.analysis.category_order_test` (spread: Kruskal-Wallis H, "is there a class effect?";
  trend: Cuzick's ρ with an expected order), the number of units significant after Benjamini-Hochberg, and a
  pooled test: the sum over units of the statistic against that sum when the labels are shuffled inside
  each unit (a stratified permutation test), so a unit's speed never counts as a class effect. The spread's
  sum adds every unit's class effect whatever its direction; the trend's sum is signed, so units that
  follow the order and units that reverse it cancel, as they should in a test of one order.

Units measured on the same tokens (``categories`` of shape (n,): every head of a model on one text) get the
same shuffle in every unit, which keeps what the units share (the tokens, their context) in the null
distribution; shuffling them independently would treat correlated units as independent evidence. Units
with labels of their own (``categories`` of shape (U, n), e.g. measured on different texts) are shuffled
independently. Either way the null is that the labels are exchangeable over a unit's tokens; neighbouring
tokens of running text are not independent, so read p-values at their floor of 1/(B + 1) together with
the effect sizes (the drift in units of the unit's spread, and ε² = H / (n − 1), the share of a unit's
rank variance that the classes explain).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import false_discovery_control

from repo_lens.analysis._checks import as_float_array, check_same_length
from repo_lens.analysis.drift import _check_count, _permuted_statistics, _prepared, _statistics, relative_drift
from repo_lens.errors import InputError

# Our subword partition (subword_categories) in the order of the post's hierarchy, highest δ first: whitespace
# tokens (newlines, runs of spaces) as its line boundaries, punctuation as its punctuation, word-initial tokens
# (those carrying the leading space: content and function words alike) as its word starts, continuations as
# its word-internal pieces. Numbers and special tokens have no place in that order and are left out.
SUBWORD_EXPECTED_ORDER: tuple[str, ...] = ("whitespace", "punctuation", "word_initial", "continuation")


def _units(values: object, categories: object) -> tuple[np.ndarray, np.ndarray, bool]:
    """(values (U, n), labels (U, n), shared) after checking shapes, NaNs and that every unit has 2 categories."""
    gaps = as_float_array(values, "values", ndim=2, shape_hint="pass one row of increments per unit, shape "
                          "(n_units, n_tokens); for one unit pass values[None]")
    labels = np.asarray(categories)
    if labels.dtype.kind not in "US" or labels.ndim not in (1, 2):
        raise InputError(f"categories must be str labels of shape (n_tokens,) or (n_units, n_tokens); got "
                         f"{labels.dtype} of shape {labels.shape}")
    shared = labels.ndim == 1
    if shared:
        check_same_length("values", gaps.shape[1], "categories", labels.size)
    elif labels.shape != gaps.shape:
        raise InputError(f"categories has shape {labels.shape} but values has shape {gaps.shape}; pass one label "
                         "per token, shape (n_tokens,) shared by every unit or (n_units, n_tokens)")
    rows = np.broadcast_to(labels, gaps.shape)
    for unit in range(1 if shared else gaps.shape[0]):
        present = np.unique(rows[unit])
        if present.size < 2:
            where = "every unit" if shared else f"unit {unit}"
            raise InputError(f"categories: {where} has tokens of one category only ({str(present[0])!r}); a class "
                             "effect needs at least 2 categories in each unit")
    return gaps, rows, shared


def _present(rows: np.ndarray, shared: bool, order: Sequence[str] | None) -> tuple[str, ...]:
    """The categories that occur in any unit: ``order``'s in its order, else in order of first appearance."""
    seen = dict.fromkeys((rows[0] if shared else rows.ravel()).tolist())
    return tuple(seen) if order is None else tuple(name for name in order if name in seen)


def _check_fraction(value: object, name: str, example: float) -> float:
    if isinstance(value, bool) or not isinstance(value, float) or not 0.0 < value < 1.0:
        raise InputError(f"{name} must be a float between 0 and 1 (e.g. {example}); got {value!r}")
    return value


@dataclass(frozen=True)
class UnitDrift:
    """Each unit's drift by category and its summary over units.

    Per unit (rows) and category (columns, ``labels`` in order of first appearance): ``count``, ``mean`` and
    ``median`` drift (δ − the unit's mean δ, ``center``) with bootstrap intervals ``mean_ci``, ``median_ci``
    (U, C, 2), and ``standardized`` = mean / ``scale`` (the unit's standard deviation): the drift in units of
    the unit's own spread (NaN where a unit has no token of a category). Over units: ``across_median`` and
    ``across_standardized`` (C,), the median over units of ``mean`` and ``standardized``, with percentile
    bootstrap intervals over units ``across_ci``, ``across_standardized_ci`` (C, 2), and ``share_positive``,
    the share of units whose mean drift is above 0."""

    labels: tuple[str, ...]
    count: np.ndarray
    center: np.ndarray
    scale: np.ndarray
    mean: np.ndarray
    mean_ci: np.ndarray
    median: np.ndarray
    median_ci: np.ndarray
    standardized: np.ndarray
    across_median: np.ndarray
    across_ci: np.ndarray
    across_standardized: np.ndarray
    across_standardized_ci: np.ndarray
    share_positive: np.ndarray
    confidence: float
    n_boot: int


def _across_units(per_unit: np.ndarray, n_boot: int, confidence: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Median over units (rows) of each column, and its percentile bootstrap interval over resampled units."""
    units = per_unit.shape[0]
    resampled = per_unit[np.random.default_rng(seed).integers(0, units, size=(n_boot, units))]  # (B, U, C)
    medians = np.nanmedian(resampled, axis=1)
    tail = (1.0 - confidence) / 2.0
    return np.nanmedian(per_unit, axis=0), np.nanquantile(medians, [tail, 1.0 - tail], axis=0).T


def unit_relative_drift(values: np.ndarray, categories: Sequence[str] | np.ndarray, *, n_boot: int = 1000,
                        confidence: float = 0.95, seed: int = 0) -> UnitDrift:
    """Each unit's drift by category from its own mean, and the median drift over units.

    ``values``: (U, n) increments, one row per unit (a head, or a layer whose heads share one increment), no
    NaN; ``categories``: (n,) labels shared by every unit, or (U, n). Each row is passed to
    :func:`~repo_lens.analysis.relative_drift` (``n_boot`` resamples per category, seeded by ``seed``); the
    interval over units resamples the units ``n_boot`` times (seeded by ``seed``).

    Example:
        >>> import numpy as np
        >>> speed = np.array([[0.5], [1.0], [2.0]])                     # three units, three speeds
        >>> d = unit_relative_drift(speed * [1.01, 1.01, 0.99, 0.99], ["p", "p", "w", "w"], n_boot=50)
        >>> d.labels, d.across_median.round(3).tolist(), d.across_standardized.round(3).tolist()
        (('p', 'w'), [0.01, -0.01], [1.0, -1.0])
    """
    gaps, rows, shared = _units(values, categories)
    n_boot = _check_count(n_boot, "n_boot", 1)
    confidence = _check_fraction(confidence, "confidence", 0.95)
    scale = gaps.std(axis=1)
    if np.any(scale == 0.0):
        raise InputError(f"values: unit {int(np.flatnonzero(scale == 0.0)[0])} is constant, so it has no drift to "
                         "compare; leave constant units out")
    labels = _present(rows, shared, None)
    shape = (gaps.shape[0], len(labels))
    count = np.zeros(shape, dtype=np.int64)
    mean, median = np.full(shape, np.nan), np.full(shape, np.nan)
    mean_ci, median_ci = np.full((*shape, 2), np.nan), np.full((*shape, 2), np.nan)
    for unit in range(gaps.shape[0]):
        drift = relative_drift(gaps[unit], rows[unit], n_boot=n_boot, confidence=confidence, seed=seed)
        columns = [labels.index(label) for label in drift.labels]
        count[unit, columns], mean[unit, columns], median[unit, columns] = drift.count, drift.mean, drift.median
        mean_ci[unit, columns], median_ci[unit, columns] = drift.mean_ci, drift.median_ci
    standardized = mean / scale[:, None]
    across, across_ci = _across_units(mean, n_boot, confidence, seed)
    across_std, across_std_ci = _across_units(standardized, n_boot, confidence, seed)
    with np.errstate(invalid="ignore"):
        share = np.sum(mean > 0, axis=0) / np.sum(~np.isnan(mean), axis=0)
    return UnitDrift(labels=labels, count=count, center=gaps.mean(axis=1), scale=scale, mean=mean, mean_ci=mean_ci,
                     median=median, median_ci=median_ci, standardized=standardized, across_median=across,
                     across_ci=across_ci, across_standardized=across_std, across_standardized_ci=across_std_ci,
                     share_positive=share, confidence=confidence, n_boot=n_boot)


@dataclass(frozen=True)
class UnitCategoryTest:
    """Per unit and pooled label-permutation tests of the categories.

    ``statistic``: "spread" (Kruskal-Wallis H) or "trend" (Cuzick's ρ with ``labels`` = the order's
    categories that occur, highest first). Per unit (U,): ``value``, ``p_value`` (as
    :func:`~repo_lens.analysis.category_order_test` gives it), ``p_adjusted`` (Benjamini-Hochberg) and
    ``significant`` (``p_adjusted`` < ``alpha``); ``effect``: for the spread ε² = H / (n − 1), the share of
    the unit's rank variance the categories explain, for the trend ρ itself. Pooled: ``pooled_value`` is
    the sum of H over units, or the mean ρ; ``pooled_p_value`` compares the sum over units with its sum under
    the same ``n_permutations`` shuffles inside each unit (two-sided on |Σρ| for the trend unless
    ``alternative="greater"``). ``shared_shuffle``: every unit got the same shuffle (shared categories)."""

    statistic: Literal["trend", "spread"]
    value: np.ndarray
    p_value: np.ndarray
    p_adjusted: np.ndarray
    significant: np.ndarray
    effect: np.ndarray
    pooled_value: float
    pooled_p_value: float
    labels: tuple[str, ...]
    n: np.ndarray
    n_permutations: int
    alternative: str
    alpha: float
    shared_shuffle: bool


def _unit_statistics(delta: np.ndarray, labels: np.ndarray, order: Sequence[str] | None, n_permutations: int,
                     rng: np.random.Generator) -> tuple[float, np.ndarray, float, int]:
    """(observed, permuted) raw statistics of one unit, the factor that turns them into H or ρ, and the
    number of tokens tested."""
    ranks, codes, tested = _prepared(delta, labels, order)
    trend = order is not None
    ranks = ranks - ranks.mean()
    observed = float(_statistics(ranks, codes[None], len(tested), trend)[0])
    permuted = _permuted_statistics(ranks, codes, len(tested), trend, n_permutations, rng)
    if trend:
        factor = 1.0 / float(np.sqrt((codes ** 2).sum() * (ranks ** 2).sum()))
    else:
        factor = 12.0 / (ranks.size * (ranks.size + 1))
    return observed, permuted, factor, int(ranks.size)


def unit_category_test(values: np.ndarray, categories: Sequence[str] | np.ndarray, order: Sequence[str] | None = None,
                       *, n_permutations: int = 999, seed: int = 0,
                       alternative: Literal["two-sided", "greater"] = "two-sided", alpha: float = 0.05) -> UnitCategoryTest:
    """Do the categories' increments differ inside each unit (``order=None``), or follow ``order`` (highest
    first)? Per unit and pooled over units, with the labels shuffled inside each unit (see the module's
    description). ``values``: (U, n), no NaN; ``categories``: (n,) shared by every unit, or (U, n).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> labels = np.repeat(["p", "w"], 200)
        >>> speed = np.array([[0.5], [1.0], [2.0]])                      # the class effect: +1% for "p"
        >>> values = speed * (1 + 0.01 * (labels == "p") + rng.normal(0, 0.01, (3, 400)))
        >>> t = unit_category_test(values, labels, n_permutations=199)
        >>> t.pooled_p_value, int(t.significant.sum())
        (0.005, 3)
    """
    gaps, rows, shared = _units(values, categories)
    n_permutations = _check_count(n_permutations, "n_permutations", 1)
    if alternative not in ("two-sided", "greater"):
        raise InputError(f"alternative must be 'two-sided' or 'greater'; got {alternative!r}")
    alpha = _check_fraction(alpha, "alpha", 0.05)
    trend = order is not None
    units = gaps.shape[0]
    value, permuted = np.empty(units), np.empty((units, n_permutations))
    exceed, sizes = np.empty(units), np.empty(units, dtype=np.int64)
    magnitude = np.abs if (trend and alternative == "two-sided") else (lambda x: x)
    for unit in range(units):
        rng = np.random.default_rng(seed if shared else [seed, unit])  # shared labels: the same shuffles in every unit
        try:
            raw, shuffled, factor, sizes[unit] = _unit_statistics(gaps[unit], rows[unit], order, n_permutations, rng)
        except InputError as error:
            if "at least 2 categories" not in str(error):
                raise
            raise InputError(f"categories of unit {unit}: {error}") from None
        exceed[unit] = np.sum(magnitude(shuffled) >= magnitude(raw) - 1e-9 * max(1.0, abs(raw)))
        value[unit], permuted[unit] = raw * factor, shuffled * factor
    p_value = (1.0 + exceed) / (1.0 + n_permutations)
    pooled, pooled_null = value.sum(), permuted.sum(axis=0)
    pooled_exceed = np.sum(magnitude(pooled_null) >= magnitude(pooled) - 1e-9 * max(1.0, abs(pooled)))
    adjusted = false_discovery_control(p_value, method="bh")
    effect = value if trend else value / (sizes - 1)
    return UnitCategoryTest(statistic="trend" if trend else "spread", value=value, p_value=p_value,
                            p_adjusted=adjusted, significant=adjusted < alpha, effect=effect,
                            pooled_value=float(value.mean() if trend else value.sum()),
                            pooled_p_value=float((1 + pooled_exceed) / (1 + n_permutations)),
                            labels=_present(rows, shared, order),
                            n=sizes, n_permutations=n_permutations, alternative=alternative, alpha=alpha,
                            shared_shuffle=shared)
