"""The cells of a patching grid and the entries of a layer's quantity each cell writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from repo_lens.interventions.selection import Site


@dataclass(frozen=True)
class Cell:
    """One grid cell: a ``layer``, one ``head`` (None: every selected head) and one ``token`` (None:
    every token; for a pairwise quantity, the token's row: the positions it sees)."""

    layer: int
    head: int | None = None
    token: int | None = None

    @property
    def index(self) -> tuple[int, ...]:
        """Where the cell's value goes in the grid's array."""
        return tuple(part for part in (self.layer, self.head, self.token) if part is not None)


def grid_cells(grid: str, sites: Sequence[Site], heads: Sequence[int], tokens: Sequence[int]) -> list[Cell]:
    """The cells of ``grid``, ordered by layer.

    >>> from repo_lens.interventions.selection import select_sites
    >>> from repo_lens.model.tiny import tiny_model
    >>> sites = select_sites(tiny_model("repo"), None)
    >>> [cell.index for cell in grid_cells("layer_head", sites, [0, 3], [])]
    [(2, 0), (2, 3), (3, 0), (3, 3)]
    """
    layers = [site.layer for site in sites]
    if grid == "layer":
        return [Cell(layer) for layer in layers]
    if grid == "layer_head":
        return [Cell(layer, head) for layer in layers for head in heads]
    return [Cell(layer, head, token) for layer in layers for head in heads for token in tokens]


def cell_mask(cell: Cell, heads: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Boolean mask shaped like one row of the quantity ([head, pos] or [head, query, key]): the
    entries ``cell`` writes (``heads``: the selected heads, for cells of every head).

    >>> cell_mask(Cell(0, head=1, token=2), torch.ones(2, dtype=torch.bool), torch.Size([2, 3])).int().tolist()
    [[0, 0, 0], [0, 0, 1]]
    """
    mask = torch.zeros(shape, dtype=torch.bool)
    rows = heads.clone() if cell.head is None else torch.arange(shape[0]) == cell.head
    if cell.token is None:
        mask[rows] = True
    else:
        mask[rows, cell.token] = True
    return mask
