"""Learning-rate schedule: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math


def learning_rate(step: int, peak: float, warmup: int, total: int, floor_ratio: float = 0.1) -> float:
    """LR at ``step`` (0-based): linear warm-up to ``peak``, cosine decay to ``floor_ratio * peak``.

    >>> [round(learning_rate(s, 1.0, 10, 110), 3) for s in (0, 9, 10, 60, 110)]
    [0.1, 1.0, 1.0, 0.55, 0.1]
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_ratio + (1 - floor_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
