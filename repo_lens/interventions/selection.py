"""Which layers and heads an intervention touches, and where each layer's positions are written.

Every layer's mechanism declares, in the registry, the hook that holds its positions (or what they
are summed from) and what "integer" and "constant" mean for it (:func:`repo_lens.model.registry.position_edit`).
A :class:`Site` is one layer's such hook.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from repo_lens.errors import InputError
from repo_lens.model.registry import PositionEdit, learned_layers, position_edit
from repo_lens.validation import check_index


@dataclass(frozen=True)
class Site:
    """Layer ``layer``'s writable positions: the hook ``hook`` and its mechanism's ``edit``."""

    layer: int
    kind: str
    edit: PositionEdit

    @property
    def hook(self) -> str:
        """The full hook name, e.g. ``blocks.3.attn.hook_pos``."""
        return f"blocks.{self.layer}.{self.edit.hook}"


def _indices(value: Any, size: int, name: str) -> list[int]:
    items = [value] if not isinstance(value, Iterable) or isinstance(value, (str, bytes)) else list(value)
    if not items:
        raise InputError(f"no {name}s selected; pass None for every one, or some {name} indices in 0..{size - 1}")
    return sorted({check_index(item, size, name, owner="model") for item in items})


def select_sites(model: Any, layers: int | Iterable[int] | None) -> list[Site]:
    """The sites of ``layers`` (an index, indices, or None: every layer whose positions are learned, or
    every layer of a model without learned positions, e.g. a RoPE baseline).

    >>> from repo_lens.model.tiny import tiny_model
    >>> [site.hook for site in select_sites(tiny_model("repo"), None)]
    ['blocks.2.attn.hook_pos', 'blocks.3.attn.hook_pos']
    """
    kinds = list(model.cfg.layer_mechanisms)
    if layers is None:
        chosen = learned_layers(kinds) or list(range(len(kinds)))
    else:
        chosen = _indices(layers, len(kinds), "layer")
    sites = []
    for layer in chosen:
        try:
            sites.append(Site(layer, kinds[layer], position_edit(kinds[layer])))
        except KeyError as error:
            raise InputError(f"layer {layer}: {error.args[0]}; pick other layers") from None
    return sites


def head_mask(model: Any, heads: int | Iterable[int] | None) -> torch.Tensor:
    """Boolean [n_heads], True for the selected heads (None: every head).

    >>> from repo_lens.model.tiny import tiny_model
    >>> head_mask(tiny_model("repo"), [0, -1]).tolist()
    [True, False, False, True]
    """
    n_heads = int(model.cfg.n_heads)
    mask = torch.zeros(n_heads, dtype=torch.bool)
    mask[[] if heads is None else _indices(heads, n_heads, "head")] = True
    return mask if heads is not None else ~mask
