"""Relative drift of learned increments by token category, and a permutation test of the categories' order
("Learned position increments", Brendan Long: "compare relative drift, not absolute δ").

A constant δ is uniform spacing, a single time-dilation with no per-token structure, so the signal of a run
is how each token's δ deviates from the run's mean. :func:`relative_drift` centres δ on the mean (optionally
dividing by the standard deviation) and gives each category's median and mean drift with percentile
bootstrap intervals. :func:`category_order_test` asks whether the categories differ at all, or in an expected
order, by shuffling the category labels:

- ``order=None`` — **spread**: the Kruskal-Wallis statistic H of the drift's ranks, large when the
  categories' mean ranks spread apart in any direction ("is there a class effect?").
- ``order=(highest, ..., lowest)`` — **trend**: the correlation ρ between each token's expected place (its
  category's place in ``order``: k for the first of k, 1 for the last) and the rank of its drift — Cuzick's
  nonparametric test for trend across ordered groups (its T = Σ place·rank, scaled to [−1, 1]). It pools the evidence of every adjacent pair into one direction, so a small shift that is
  consistent with the order is detected where a spread statistic is not, and its sign says whether the
  run follows the order (ρ > 0) or reverses it (ρ < 0). Tokens of categories not in ``order`` are left out.

Both work on ranks, so centring or scaling the drift changes nothing, and the p-value of a label
permutation test is exact under the null of exchangeable labels (uniform up to its 1/(B+1) grid).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import rankdata

from repo_lens.analysis._checks import as_float_array, check_same_length
from repo_lens.errors import InputError

# The graft script's expected hierarchy (analyze_deltas.py's docstring: "EOS > sentence punctuation > content >
# function > subword"), in its category names, highest δ first.
POST_EXPECTED_ORDER: tuple[str, ...] = ("sentence_punct", "word_start", "function_word", "subword_continuation")
PERMUTATION_CHUNK = 64  # permutations evaluated at once


@dataclass(frozen=True)
class CategoryDrift:
    """Drift (δ − ``center``, divided by ``scale``) per category: ``labels`` in order of first appearance,
    ``count``, ``median``, ``mean`` (C,), and their bootstrap intervals ``median_ci``, ``mean_ci`` (C, 2)."""

    labels: tuple[str, ...]
    count: np.ndarray
    median: np.ndarray
    mean: np.ndarray
    median_ci: np.ndarray
    mean_ci: np.ndarray
    center: float
    scale: float
    confidence: float
    n_boot: int

    def as_dict(self) -> dict[str, dict[str, float | int | list[float]]]:
        return {label: {"count": int(self.count[k]), "median": float(self.median[k]), "mean": float(self.mean[k]),
                        "median_ci": self.median_ci[k].tolist(), "mean_ci": self.mean_ci[k].tolist()}
                for k, label in enumerate(self.labels)}


def _values_and_labels(values: object, categories: object) -> tuple[np.ndarray, np.ndarray]:
    delta = as_float_array(values, "values", ndim=1, shape_hint="pass one δ per token, shape (n,)")
    labels = np.asarray(categories)
    if labels.ndim != 1 or labels.dtype.kind not in "US":
        raise InputError(f"categories must be a 1-D array of str labels, one per value; got {labels.dtype} "
                         f"of shape {labels.shape}")
    check_same_length("values", delta.size, "categories", labels.size)
    return delta, labels


def _check_count(value: object, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise InputError(f"{name} must be an int >= {least}; got {value!r}")
    return int(value)


def _bootstrap(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Medians and means of ``n_boot`` resamples (with replacement) of ``values``, a few at a time."""
    medians, means = [], []
    chunk = max(1, 2_000_000 // values.size)
    for start in range(0, n_boot, chunk):
        samples = values[rng.integers(0, values.size, size=(min(chunk, n_boot - start), values.size))]
        medians.append(np.median(samples, axis=1))
        means.append(samples.mean(axis=1))
    return np.concatenate(medians), np.concatenate(means)


def relative_drift(values: np.ndarray, categories: Sequence[str] | np.ndarray, *, standardize: bool = False,
                   n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> CategoryDrift:
    """Each category's drift from the run's mean δ, with percentile bootstrap intervals.

    ``values``: (n,) δ of n tokens (e.g. a vocabulary's, unused ids left out); ``categories``: (n,) labels.
    Drift = δ − mean(δ), divided by std(δ) (ddof 0) when ``standardize``. Intervals: ``n_boot`` resamples
    of each category's drift with replacement (seeded by ``seed``), the central ``confidence`` share.

    Example:
        >>> import numpy as np
        >>> d = relative_drift(np.array([1.0, 1.2, 0.8, 1.0]), ["punct", "punct", "word", "word"], n_boot=200)
        >>> d.labels, d.median.round(3).tolist(), round(d.center, 3)
        (('punct', 'word'), [0.1, -0.1], 1.0)
    """
    delta, labels = _values_and_labels(values, categories)
    n_boot = _check_count(n_boot, "n_boot", 1)
    if isinstance(confidence, bool) or not isinstance(confidence, float) or not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be a float between 0 and 1 (e.g. 0.95); got {confidence!r}")
    center = float(delta.mean())
    scale = float(delta.std()) if standardize else 1.0
    if scale == 0.0:
        raise InputError("every δ is the same, so the drift cannot be standardised; pass standardize=False")
    drift = (delta - center) / scale
    rng = np.random.default_rng(seed)
    names = tuple(dict.fromkeys(labels.tolist()))
    tail = (1.0 - confidence) / 2.0
    rows = []
    for name in names:
        member = drift[labels == name]
        medians, means = _bootstrap(member, n_boot, rng)
        rows.append((member.size, np.median(member), member.mean(), np.quantile(medians, [tail, 1 - tail]),
                     np.quantile(means, [tail, 1 - tail])))
    count, median, mean, median_ci, mean_ci = (np.asarray(column) for column in zip(*rows))
    return CategoryDrift(labels=names, count=count.astype(np.int64), median=median.astype(float),
                         mean=mean.astype(float), median_ci=median_ci, mean_ci=mean_ci, center=center,
                         scale=scale, confidence=confidence, n_boot=n_boot)


@dataclass(frozen=True)
class OrderTest:
    """A label-permutation test of the categories: ``statistic`` is "trend" (ρ of place and rank) or
    "spread" (Kruskal-Wallis H); ``value`` its observed value, ``p_value`` = (1 + #{permuted ≥ observed})
    / (1 + n_permutations) (two-sided on |ρ| for the trend unless ``alternative="greater"``); ``labels``: the
    categories tested (``order``'s that occur, highest first, or every category); ``n``: tokens tested."""

    statistic: Literal["trend", "spread"]
    value: float
    p_value: float
    n_permutations: int
    labels: tuple[str, ...]
    n: int
    alternative: str


def _statistics(ranks: np.ndarray, codes: np.ndarray, n_groups: int, trend: bool) -> np.ndarray:
    """The statistic of each row of ``codes`` (permutations × n): Σ score·rank for the trend (codes are
    centred scores), Σ_g R_g² / n_g (the part of H that varies with the labels) for the spread."""
    if trend:
        return codes @ ranks
    rows = codes.shape[0]
    offsets = (codes + n_groups * np.arange(rows)[:, None]).ravel()
    sums = np.bincount(offsets, weights=np.tile(ranks, rows), minlength=rows * n_groups).reshape(rows, n_groups)
    sizes = np.bincount(codes[0], minlength=n_groups)
    return (sums ** 2 / sizes).sum(axis=1)


def _permuted_statistics(ranks: np.ndarray, codes: np.ndarray, n_groups: int, trend: bool, n_permutations: int,
                         rng: np.random.Generator) -> np.ndarray:
    """The statistic under ``n_permutations`` shuffles of ``codes``, drawn from ``rng`` a chunk at a time."""
    permuted = []
    for start in range(0, n_permutations, PERMUTATION_CHUNK):
        shuffled = rng.permuted(np.broadcast_to(codes, (min(PERMUTATION_CHUNK, n_permutations - start), codes.size)),
                                axis=1)
        permuted.append(_statistics(ranks, shuffled, n_groups, trend))
    return np.concatenate(permuted)


def _prepared(delta: np.ndarray, labels: np.ndarray, order: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(ranks, codes, tested labels): centred scores for a trend, group codes for the spread."""
    if order is None:
        tested = tuple(dict.fromkeys(labels.tolist()))
        codes = np.unique(labels, return_inverse=True)[1]
        keep = np.ones(labels.size, dtype=bool)
    else:
        if isinstance(order, (str, bytes)) or len(set(order)) != len(order) or not all(isinstance(o, str) for o in order):
            raise InputError(f"order must be distinct category names, highest δ first; got {order!r:.80}")
        tested = tuple(name for name in order if np.any(labels == name))
        keep = np.isin(labels, tested)
        place = {name: len(tested) - k for k, name in enumerate(tested)}  # higher = expected larger δ
        codes = np.asarray([place[name] for name in labels[keep]], dtype=np.float64)
        codes -= codes.mean()
    if len(tested) < 2:
        raise InputError(f"the test needs tokens of at least 2 categories; found {list(tested)}"
                         + ("" if order is None else f" of order {list(order)}"))
    return rankdata(delta[keep]), codes, tested


def category_order_test(values: np.ndarray, categories: Sequence[str] | np.ndarray,
                        order: Sequence[str] | None = None, *, n_permutations: int = 999, seed: int = 0,
                        alternative: Literal["two-sided", "greater"] = "two-sided") -> OrderTest:
    """Do the categories' δ differ (``order=None``), or follow ``order`` (highest first)? A permutation test
    with the category labels shuffled (see the module's description for the two statistics).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> labels = np.repeat(["punct", "word", "subword"], 300)
        >>> delta = 1.0 + 0.005 * np.repeat([2, 1, 0], 300) + rng.normal(0, 0.01, 900)   # 0.5% steps
        >>> r = category_order_test(delta, labels, order=["punct", "word", "subword"], n_permutations=199)
        >>> r.value > 0, r.p_value
        (True, 0.005)
    """
    delta, labels = _values_and_labels(values, categories)
    n_permutations = _check_count(n_permutations, "n_permutations", 1)
    if alternative not in ("two-sided", "greater"):
        raise InputError(f"alternative must be 'two-sided' or 'greater'; got {alternative!r}")
    ranks, codes, tested = _prepared(delta, labels, order)
    trend = order is not None
    ranks = ranks - ranks.mean()
    n_groups = len(tested)
    observed = float(_statistics(ranks, codes[None], n_groups, trend)[0])
    permuted = _permuted_statistics(ranks, codes, n_groups, trend, n_permutations, np.random.default_rng(seed))
    sign = (lambda x: np.abs(x)) if (trend and alternative == "two-sided") else (lambda x: x)
    exceed = int(np.sum(sign(permuted) >= sign(observed) - 1e-9 * max(1.0, abs(observed))))
    if trend:
        value = observed / float(np.sqrt((codes ** 2).sum() * (ranks ** 2).sum()))
    else:
        n = ranks.size
        value = 12.0 / (n * (n + 1)) * observed  # H = 12/(n(n+1)) Σ R_g²/n_g − 3(n+1), R_g from centred ranks
    return OrderTest(statistic="trend" if trend else "spread", value=value, p_value=(1 + exceed) / (1 + n_permutations),
                     n_permutations=n_permutations, labels=tested, n=int(ranks.size), alternative=alternative)
