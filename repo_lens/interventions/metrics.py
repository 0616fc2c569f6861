"""What a run is scored by and what a grid returns: the metrics and ``InterventionGrid``.

The last stage of the data path: a metric reads a run's logits into one value a row, and a grid's values
and their cells come back as an ``InterventionGrid`` (their uncertainty: ``stats``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from repo_lens.data.spans import Prompt
from repo_lens.errors import InputError
from repo_lens.options import keyword_dataclass


Metric = Callable[[torch.Tensor], torch.Tensor]
# A metric may also say which logits it reads: ``metric.first_row(width)`` -> the first token whose
# logits it reads, of ``width`` tokens. Grids then compute the logits of that token on only (the
# others hold NaN); a metric without it gets every token's logits.
Target = tuple[np.ndarray, tuple[int, int]]


def _target(item: Any) -> Target:
    if isinstance(item, Prompt):
        return np.asarray(item.ids, dtype=np.int64), cast("tuple[int, int]", tuple(item.query))
    if isinstance(item, tuple) and len(item) == 2 and len(item[1]) == 2:
        return np.asarray(item[0], dtype=np.int64), (int(item[1][0]), int(item[1][1]))
    raise InputError(f"a metric target is a Prompt or (token ids, (start, end)), got {type(item).__name__}")


def _targets(prompts: Any) -> list[Target]:
    items = list(prompts) if isinstance(prompts, (list, tuple)) and not _looks_like_pair(prompts) else [prompts]
    targets = [_target(item) for item in items]
    for ids, (start, end) in targets:
        if not 1 <= start < end <= len(ids):
            raise InputError(f"the answer span ({start}, {end}) must lie in 1..{len(ids)} tokens with start >= 1 "
                             "(the token before it predicts its first token)")
    return targets


def _looks_like_pair(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], (tuple, list)) and len(value[1]) == 2


class _TokenScores:
    """Per row: the log-probabilities of the target's span tokens, and whether each is the argmax."""

    def __init__(self, prompts: Any) -> None:
        self.targets = _targets(prompts)

    def _rows(self, batch: int) -> list[int]:
        if len(self.targets) == 1:
            return [0] * batch
        if len(self.targets) != batch:
            raise InputError(f"this metric scores {len(self.targets)} targets but the logits hold {batch} rows; "
                             "build it for one target (every row) or one per row")
        return list(range(batch))

    def first_row(self, width: int) -> int:
        """The first token whose logits the metric reads: the one before the earliest answer start."""
        return min(start for _, (start, _) in self.targets) - 1

    def scores(self, logits: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = []
        for row, index in enumerate(self._rows(logits.shape[0])):
            ids, (start, end) = self.targets[index]
            predicted = logits[row, start - 1:end - 1].float()
            wanted = torch.as_tensor(ids[start:end], device=logits.device)
            logp = predicted.log_softmax(-1).gather(-1, wanted[:, None])[:, 0]
            out.append((logp, predicted.argmax(-1) == wanted))
        return out


class AnswerLogProb(_TokenScores):
    """Σ log p(answer token | prefix) over the answer span (teacher forced)."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.stack([logp.sum() for logp, _ in self.scores(logits)])


class SpanLoss(_TokenScores):
    """Mean next-token cross-entropy (nats) over the span's tokens."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.stack([-logp.mean() for logp, _ in self.scores(logits)])


class NiahExactMatch(_TokenScores):
    """1.0 when every answer token is the argmax given the correct prefix (greedy decoding reproduces the
    answer), else 0.0. Not differentiable."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.stack([hits.all().float() for _, hits in self.scores(logits)])


def answer_logprob(prompts: Prompt | Target | Sequence[Prompt | Target]) -> AnswerLogProb:
    """The answer's log-probability under teacher forcing (sum over its tokens).

    >>> ids = np.array([3, 1, 2])
    >>> metric = answer_logprob((ids, (1, 3)))
    >>> round(float(metric(torch.zeros(2, 3, 4))[0]), 4)   # uniform over 4 tokens, two answer tokens
    -2.7726
    """
    return AnswerLogProb(prompts)


def span_loss(prompts: Prompt | Target | Sequence[Prompt | Target]) -> SpanLoss:
    """Mean cross-entropy over the span (the Prompt's answer, or the pair's (start, end)).

    >>> round(float(span_loss((np.array([3, 1, 2]), (1, 3)))(torch.zeros(1, 3, 4))[0]), 4)
    1.3863
    """
    return SpanLoss(prompts)


def niah_exact_match(prompts: Prompt | Target | Sequence[Prompt | Target]) -> NiahExactMatch:
    """NIAH exact match: every answer token is the model's argmax.

    >>> logits = torch.zeros(1, 3, 4); logits[0, 0, 1] = logits[0, 1, 2] = 5.0
    >>> niah_exact_match((np.array([3, 1, 2]), (1, 3)))(logits).tolist()
    [1.0]
    """
    return NiahExactMatch(prompts)


def logit_difference(correct: int, wrong: int, position: int = -1) -> Metric:
    """logit[position, correct] − logit[position, wrong] in every row.

    >>> logits = torch.zeros(1, 2, 3); logits[0, -1, 2] = 1.5
    >>> logit_difference(2, 0)(logits).tolist()
    [1.5]
    """
    return LogitDifference(correct, wrong, position)


class LogitDifference:
    """logit[position, correct] − logit[position, wrong] (see :func:`logit_difference`)."""

    def __init__(self, correct: int, wrong: int, position: int) -> None:
        self.correct, self.wrong, self.position = correct, wrong, position

    def first_row(self, width: int) -> int:
        return self.position % width

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        last = logits[:, self.position].float()
        return last[:, self.correct] - last[:, self.wrong]


def first_logit_row(metrics: Sequence[Metric], width: int) -> int:
    """The first token whose logits any of ``metrics`` reads (0 when one does not say).

    >>> first_logit_row([logit_difference(1, 2), answer_logprob((np.arange(9), (6, 8)))], 9)
    5
    >>> first_logit_row([logit_difference(1, 2), lambda logits: logits[:, 0, 0]], 9)
    0
    """
    rows: list[Any] = [getattr(metric, "first_row", None) for metric in metrics]  # each first_row, or None
    if not rows or any(row is None for row in rows):
        return 0
    return max(0, min(min(int(row(width)), width - 1) for row in rows))


def metric_values(metric: Metric, logits: torch.Tensor) -> torch.Tensor:
    """``metric(logits)`` as a float tensor [batch], or an InputError saying what the metric returned.

    >>> metric_values(lambda logits: logits[:, -1, 0], torch.zeros(2, 3, 4)).shape
    torch.Size([2])
    """
    if not callable(metric):
        raise InputError(f"metric must be a callable from logits [batch, pos, vocab] to [batch], got {metric!r:.60}")
    values = metric(logits)
    if not isinstance(values, torch.Tensor):
        values = torch.as_tensor(np.asarray(values, dtype=np.float64))
    batch = logits.shape[0]
    if tuple(values.shape) != (batch,):
        raise InputError(f"the metric must return one number per batch row (shape ({batch},)); it returned shape "
                         f"{tuple(values.shape)}")
    return values if values.is_floating_point() else values.to(torch.float32)


GRIDS = ("layer", "layer_head", "layer_head_position")


def check_grid(grid: Any) -> str:
    """``grid`` if it is one of GRIDS, else an InputError naming them.

    >>> check_grid("layer_head")
    'layer_head'
    """
    if grid not in GRIDS:
        raise InputError(f"unknown grid {grid!r:.40}; choose one of {', '.join(GRIDS)}")
    return grid


@keyword_dataclass
@dataclass(kw_only=True)
class InterventionGrid:
    """One metric value per cell of a layer (× head (× token)) grid.

    method: "patch" (exact: one patched run per cell), "attribute" (the gradient estimate) or "ablate"
        (``ablation_grid``: one cell ablated at a time).
    values: the metric with the cell's clean positions written into the corrupted run (for
        "attribute", baseline + the estimate); shape (n_layers,), (n_layers, n_heads) or
        (n_layers, n_heads, corrupted tokens); NaN where there is no cell (layers and heads not
        selected, tokens with no clean counterpart).
    baseline: the metric of the corrupted run, nothing patched. clean: of the clean run (NaN when the
        prompts differ in length, as the metric then reads other tokens).
    layers, heads: the layers and heads the grid covers. seconds: its wall time.
    also: the grids of the further metrics measured on the same runs (``GridOptions(also=...)`` of patch and
        ablation_grid); their baselines in ``meta["also_baseline"]``.

    Example:
        >>> grid = InterventionGrid(method="patch", grid="layer", values=np.array([np.nan, 1.0]), baseline=0.5,
        ...                         clean=2.0, layers=[1], heads=[0, 1])
        >>> grid.effects.tolist(), grid.normalized().tolist()
        ([nan, 0.5], [nan, 0.3333333333333333])
    """

    method: str
    grid: str
    values: np.ndarray
    baseline: float
    clean: float
    layers: list[int]
    heads: list[int]
    seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    also: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def effects(self) -> np.ndarray:
        """values − baseline: what writing each cell's clean positions changes."""
        return self.values - self.baseline

    def normalized(self) -> np.ndarray:
        """effects / (clean − baseline): 1 where a cell restores the clean metric, 0 where it changes nothing."""
        return self.effects / (self.clean - self.baseline)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, floats; NaN as None) for JSON."""
        return {"method": self.method, "grid": self.grid, "values": _plain(self.values), "baseline": self.baseline,
                "clean": self.clean if np.isfinite(self.clean) else None, "layers": self.layers,
                "heads": self.heads, "seconds": self.seconds, "meta": self.meta,
                "also": {name: _plain(values) for name, values in self.also.items()}}


def _plain(values: np.ndarray) -> list:
    out = values.astype(object)
    out[~np.isfinite(values)] = None
    return out.tolist()
