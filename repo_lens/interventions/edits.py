"""What each mode writes into a layer's position quantity (the tensor at its :class:`Site`'s hook).

The quantity is [batch, head, pos] (positions, increments, forget-gate logs) or, for ``pairwise``
mechanisms, [batch, head, query_pos, key_pos] (CoPE gates, GRAPE-AP potentials). "integer" and
"constant" take their values from the registry; "interpolate" mixes the layer's own values with them;
"mean" writes a reference set's mean at each token index; "shuffle" permutes the tokens, "window"
within blocks of a few tokens; "affine", "rank", "scaled" and "random" edit the positions on their own
scale (:mod:`repo_lens.interventions.scale_edits`).
"""

from __future__ import annotations

import torch

from repo_lens.interventions.modes import Mode
from repo_lens.interventions.scale_edits import SCALE_MODES, scale_edit
from repo_lens.model.registry import PositionEdit


def target_values(edit: PositionEdit, value: torch.Tensor, which: str) -> torch.Tensor:
    """The values of ``which`` ("integer" or "constant") shaped like ``value``.

    >>> from repo_lens.model.registry import position_edit
    >>> target_values(position_edit("repo"), torch.zeros(1, 2, 3), "integer")[0, 1].tolist()
    [0.0, 1.0, 2.0]
    """
    if which == "constant":
        return torch.full_like(value, edit.constant)
    if edit.integer is not None:
        return torch.full_like(value, edit.integer)
    if edit.pairwise:
        raise ValueError(f"{edit.hook}: a pairwise quantity needs a number as its integer value, not the index")
    index = torch.arange(value.shape[2], device=value.device, dtype=value.dtype)
    return index.expand_as(value)


def shuffle_orders(lengths: list[int], width: int, seed: int) -> torch.Tensor:
    """[batch, width] token orders: row b's first ``lengths[b]`` entries are
    ``torch.randperm(lengths[b], generator=torch.Generator().manual_seed(seed + b))``, the rest (pads) stay.

    >>> shuffle_orders([3, 2], 3, seed=0)[:, 2].tolist()
    [1, 2]
    """
    orders = torch.arange(width).repeat(len(lengths), 1)
    for row, length in enumerate(lengths):
        orders[row, :length] = torch.randperm(length, generator=torch.Generator().manual_seed(seed + row))
    return orders


def window_orders(lengths: list[int], width: int, window: int, seed: int) -> torch.Tensor:
    """[batch, width] token orders that permute tokens only within consecutive blocks of ``window``
    tokens (the last block of a row may be shorter; pads stay): a local disorder that keeps every
    token's position within ``window`` − 1 of its own.

    >>> orders = window_orders([6], 6, 3, seed=0)[0].tolist()
    >>> sorted(orders[:3]), sorted(orders[3:])
    ([0, 1, 2], [3, 4, 5])
    """
    orders = torch.arange(width).repeat(len(lengths), 1)
    for row, length in enumerate(lengths):
        generator = torch.Generator().manual_seed(seed + row)
        for start in range(0, length, window):
            size = min(window, length - start)
            orders[row, start:start + size] = start + torch.randperm(size, generator=generator)
    return orders


def shuffled(value: torch.Tensor, orders: torch.Tensor, pairwise: bool) -> torch.Tensor:
    """``value`` with its tokens in ``orders``: new[..., t] = value[..., order[t]]. A pairwise quantity
    keeps causality: query row i permutes its visible keys 0..i in the order they appear in ``order``.

    >>> shuffled(torch.tensor([[[10.0, 11.0, 12.0]]]), torch.tensor([[2, 0, 1]]), pairwise=False).tolist()
    [[[12.0, 10.0, 11.0]]]
    """
    orders = orders.to(value.device)
    width = value.shape[-1]
    if not pairwise:
        return value.gather(-1, orders[:, None, :width].expand_as(value))
    rank = torch.empty_like(orders)
    rank.scatter_(1, orders, torch.arange(orders.shape[1], device=orders.device).expand_as(orders))
    keys = torch.arange(width, device=value.device)
    visible = keys[None, :] <= keys[:, None]  # [query, key]
    scores = torch.where(visible[None], rank[:, None, :width], width + keys[None, None, :])
    by_row = scores.argsort(dim=-1)  # [batch, query, key]: row i's visible keys first, in order's order
    return value.gather(-1, by_row[:, None].expand_as(value))


def token_orders(mode: Mode, lengths: list[int], width: int, seed: int) -> torch.Tensor | None:
    """The token orders of "shuffle" (:func:`shuffle_orders`) and "window" (:func:`window_orders`); None otherwise."""
    if mode.name == "shuffle":
        return shuffle_orders(lengths, width, seed)
    if mode.name == "window":
        return window_orders(lengths, width, mode.width, seed)
    return None


def edit_values(value: torch.Tensor, mode: Mode, edit: PositionEdit, *, mean: torch.Tensor | None = None,
                orders: torch.Tensor | None = None, lengths: list[int] | None = None, seed: int = 0) -> torch.Tensor:
    """The quantity ``value`` after ``mode`` in every head (:func:`keep_heads` restricts it).
    ``mean`` [1, head, ≥pos (, ≥pos)]: the reference mean ("mean"); ``orders``: :func:`token_orders`
    ("shuffle", "window"); ``lengths``: each row's real tokens (None: every entry), ``seed``: "random"'s direction.

    >>> from repo_lens.model.registry import position_edit
    >>> z = torch.full((1, 1, 3), 4.0)
    >>> edit_values(z, Mode("interpolate", 0.25), position_edit("repo")).tolist()
    [[[3.0, 3.25, 3.5]]]
    """
    if mode.name in ("integer", "constant"):
        return target_values(edit, value, mode.name)
    if mode.name == "interpolate":
        return (1.0 - mode.p) * value + mode.p * target_values(edit, value, mode.toward)
    if mode.name in SCALE_MODES:
        return scale_edit(value, mode.name, edit, target_values(edit, value, "integer"), lengths, seed)
    if mode.name == "mean":
        width = value.shape[2]
        assert mean is not None  # "mean" mode: the caller passes the reference mean
        window = mean[:, :, :width, :width] if edit.pairwise else mean[:, :, :width]
        return window.to(value.device, value.dtype).expand_as(value)
    assert orders is not None  # a shuffle mode: the caller passes token_orders
    return shuffled(value, orders, edit.pairwise)


def keep_heads(edited: torch.Tensor, original: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """``edited`` in the heads where ``heads`` [head] is True, ``original`` elsewhere.

    >>> keep_heads(torch.ones(1, 2, 1), torch.zeros(1, 2, 1), torch.tensor([False, True])).flatten().tolist()
    [0.0, 1.0]
    """
    shape = (1, -1) + (1,) * (original.dim() - 2)
    return torch.where(heads.to(original.device).view(shape), edited, original)


def keep_tokens(edited: torch.Tensor, original: torch.Tensor, tokens: torch.Tensor | None) -> torch.Tensor:
    """``edited`` at the tokens where ``tokens`` [batch, pos] is True (for a pairwise quantity, those
    tokens' query rows), ``original`` elsewhere; None: every token.

    >>> keep_tokens(torch.ones(1, 1, 3), torch.zeros(1, 1, 3), torch.tensor([[True, False, True]])).tolist()
    [[[1.0, 0.0, 1.0]]]
    """
    if tokens is None:
        return edited
    mask = tokens.to(original.device)[:, None, :original.shape[2]]
    mask = mask if original.dim() == 3 else mask[..., None]
    return torch.where(mask, edited, original)
