"""The result of a patching or attribution grid."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repo_lens.errors import InputError

GRIDS = ("layer", "layer_head", "layer_head_position")


def check_grid(grid: Any) -> str:
    """``grid`` if it is one of GRIDS, else an InputError naming them.

    >>> check_grid("layer_head")
    'layer_head'
    """
    if grid not in GRIDS:
        raise InputError(f"unknown grid {grid!r:.40}; choose one of {', '.join(GRIDS)}")
    return grid


@dataclass
class InterventionGrid:
    """One metric value per cell of a layer (× head (× token)) grid.

    method: "patch" (exact: one patched run per cell) or "attribute" (the gradient estimate).
    values: the metric with the cell's clean positions written into the corrupted run (for
        "attribute", baseline + the estimate); shape (n_layers,), (n_layers, n_heads) or
        (n_layers, n_heads, corrupted tokens); NaN where there is no cell (layers and heads not
        selected, tokens with no clean counterpart).
    baseline: the metric of the corrupted run, nothing patched. clean: of the clean run (NaN when the
        prompts differ in length, as the metric then reads other tokens).
    layers, heads: the layers and heads the grid covers. seconds: its wall time.
    also: the grids of the further metrics measured on the same runs (``also=`` of patch / ablation_grid);
        their baselines in ``meta["also_baseline"]``.

    Example:
        >>> grid = InterventionGrid("patch", "layer", np.array([np.nan, 1.0]), baseline=0.5, clean=2.0,
        ...                         layers=[1], heads=[0, 1])
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
