"""What the ``attention_sources`` study reads from a score decomposition (pure functions on its arrays).

- :func:`target_measures`: per head, the attention each pattern of the decomposition (actual, content only,
  position only, integer reference) puts on the keys each query row should attend to, and how far the
  content part and the position part of the score lift those keys above the others the row sees.
- :func:`pick_heads`: the heads that attend to their targets, from the actual masses of a few inputs.
- :func:`score_position_share`: the position part's share of the score's variance over keys.
- :func:`closer_share`: where a head's positions put the target among the keys a row sees.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from repo_lens.errors import InputError

PATTERNS = ("actual", "content", "position", "reference")
MIN_MASS = 0.3  # a head attends to its targets when its mean actual mass there is at least this ...
RELATIVE_MASS = 0.5  # ... and at least this share of the best head's
AT_MOST = 3  # heads picked at most


def target_measures(found, targets: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Per head of ``found`` (a :class:`~repo_lens.analysis.ScoreDecomposition`), averaged over its query rows:
    ``mass_<pattern>``, the attention the pattern puts on the row's ``targets`` (key indices, one array per row,
    among the decomposition's keys), and ``lead_content`` / ``lead_position``, the content and position parts'
    mean over the targets less their mean over the other keys the row sees (together: the targets' lead in the
    score). A row whose targets it does not see is an InputError.

    Example:
        >>> import repo_lens
        >>> from repo_lens.analysis import score_decomposition
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> found = score_decomposition(lens, [5, 9, 2, 7, 3, 8], layer=2, queries=[4, 5])
        >>> measured = target_measures(found, [np.array([0, 1]), np.array([0, 1])])
        >>> sorted(measured), measured["mass_actual"].shape
        (['lead_content', 'lead_position', 'mass_actual', 'mass_content', 'mass_position', 'mass_reference'], (4,))
    """
    if len(targets) != len(found.queries):
        raise InputError(f"targets holds {len(targets)} arrays of keys; give one per query row ({len(found.queries)})")
    where = {int(key): index for index, key in enumerate(found.keys)}
    sums: dict[str, np.ndarray] = {}
    for row, wanted in enumerate(targets):
        columns = [where.get(int(key), -1) for key in np.atleast_1d(wanted)]
        if not columns or min(columns) < 0 or not found.mask[row, columns].all():
            raise InputError(f"query row {int(found.queries[row])}: its targets {np.atleast_1d(wanted).tolist()} must be "
                             "keys of the decomposition at or before the row")
        inside = np.zeros(len(found.keys), dtype=bool)
        inside[columns] = True
        others = found.mask[row] & ~inside
        row_values = {f"mass_{name}": pattern[:, row, inside].sum(-1) for name, pattern in found.patterns.items()}
        for part, values in (("content", found.content), ("position", found.position)):
            lead = values[:, row, inside].mean(-1) - (values[:, row, others].mean(-1) if others.any() else 0.0)
            row_values[f"lead_{part}"] = lead
        for name, value in row_values.items():
            sums[name] = sums.get(name, 0.0) + value
    return {name: np.asarray(total, dtype=float) / len(targets) for name, total in sums.items()}


def pick_heads(mass: np.ndarray, layers: Sequence[int], minimum: float = MIN_MASS, relative: float = RELATIVE_MASS,
               at_most: int = AT_MOST) -> tuple[list[tuple[int, int]], bool]:
    """The heads that attend to their targets: from ``mass`` [input, layer, head] (the actual attention mass on
    the targets, ``layers`` naming its layer axis), the heads whose mean over the inputs is at least ``minimum``
    and at least ``relative`` times the best head's, best first, at most ``at_most`` of them; when no head
    reaches ``minimum``, the best head alone. Returns ((layer, head) pairs, whether some head reached it).

    Example:
        >>> mass = np.array([[[0.1, 0.9], [0.5, 0.2]], [[0.1, 0.7], [0.3, 0.0]]])  # 2 inputs, 2 layers, 2 heads
        >>> pick_heads(mass, [2, 3])
        ([(2, 1), (3, 0)], True)
        >>> pick_heads(mass * 0.1, [2, 3])
        ([(2, 1)], False)
    """
    mass = np.asarray(mass, dtype=float)
    if mass.ndim != 3 or mass.shape[1] != len(layers) or mass.shape[0] == 0:
        raise InputError(f"mass must be [input, layer, head] with {len(layers)} layers and at least one input; "
                         f"got shape {mass.shape}")
    mean = mass.mean(axis=0)
    order = np.argsort(-mean, axis=None, kind="stable")
    best = float(mean.flat[order[0]])
    chosen = [index for index in order if mean.flat[index] >= max(minimum, relative * best)][:at_most]
    reached = bool(chosen)
    pairs = [np.unravel_index(index, mean.shape) for index in (chosen or order[:1])]
    return [(int(layers[layer]), int(head)) for layer, head in pairs], reached


def _centred(values: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """``values`` [head, row, key, ...] less their mean over the keys each row sees (``visible`` [row, key]);
    0 at the keys it does not see."""
    weight = visible.reshape(visible.shape + (1,) * (values.ndim - 3))[None]
    weight = np.broadcast_to(weight, values.shape)
    clean = np.where(weight, values, 0.0)
    count = np.maximum(weight.sum(axis=2, keepdims=True), 1)
    return np.where(weight, clean - clean.sum(axis=2, keepdims=True) / count, 0.0)


def score_position_share(position: np.ndarray, score: np.ndarray, mask: np.ndarray) -> float:
    """The position part's share of the score's variance over the keys each row sees, Σ Cov(position, score) /
    Σ Var(score), pooled over heads and rows ([head, row, key] arrays; NaN entries must be masked out).

    >>> score = np.array([[[1.0, 3.0]]]); score_position_share(score / 2, score, np.ones((1, 2), dtype=bool))
    0.5
    """
    centred_score, centred_position = _centred(score, mask), _centred(position, mask)
    variance = float((centred_score * centred_score).sum())
    return float((centred_position * centred_score).sum() / variance) if variance > 0 else float("nan")


def closer_share(positions: np.ndarray, rows: Sequence[int], targets: Sequence[np.ndarray]) -> float:
    """The share of the keys a row sees (the row itself included) whose position is closer to the row's than
    its targets' (mean over the targets and rows): near 0 when the head places the targets next to the row,
    about the targets' distance over the row's index under integer positions. ``positions`` [token].

    >>> closer_share(np.arange(10.0), [9], [np.array([5])])  # keys 6..9 are closer: 4 of 10
    0.4
    >>> closer_share(np.array([0, 1, 2, 3, 4, 8.5, 6, 7, 8, 9]), [9], [np.array([5])])
    0.1
    """
    shares = []
    for row, wanted in zip(rows, targets):
        distance = np.abs(positions[: row + 1] - positions[row])
        for key in np.atleast_1d(wanted):
            shares.append(float((distance < distance[key]).mean()))
    return float(np.mean(shares))
