"""Edits on the positions' own scale: "affine", "rank", "scaled" and the "random" control.

They work on the positions a layer uses, not on the hooked quantity: increments (learned increments,
FoX, GRAPE-M) and pairwise gates (CoPE, GRAPE-AP) are summed into positions as the registry's ``sum``
says, edited there, and turned back into the quantity. Each head (and, for a pairwise quantity, each
query row) is edited on its own tokens only: a right-padded row's pads take no part. An exclusive sum
starts at 0 by construction, so its edited positions are shifted to start there (rotations and
additive biases see only differences of positions: the shift changes nothing); CoPE's are kept at
or above 10⁻³ (its positions index an embedding table from 0).

- "affine": the least-squares line a + b·I fitted to the head's positions against the integer
  positions I (the token index for RePo), written in their place: scale and offset kept, every
  non-linear detail removed.
- "rank": the positions' order kept, the spacing made even over the head's own range [min, max].
- "scaled": the integer positions rescaled to the head's range: RoPE's layout at the head's scale.
- "random": the positions moved by a random Gaussian direction whose length is the "affine" edit's
  (per head and row): a control of the same size that keeps nothing in particular.
"""

from __future__ import annotations

import torch

from repo_lens.model.registry import PositionEdit

SCALE_MODES = ("affine", "rank", "scaled", "random")
SUFFIX_FLOOR = 1e-3  # the least edited CoPE position: float rounding of a sum at 0 must not reach index −1


def valid_mask(value: torch.Tensor, lengths: list[int] | None, pairwise: bool) -> torch.Tensor:
    """Boolean, broadcastable to ``value``: the entries of real tokens (for a pairwise quantity, the keys
    j ≤ i of each query i).

    >>> valid_mask(torch.zeros(2, 1, 3), [3, 2], pairwise=False)[:, 0].int().tolist()
    [[1, 1, 1], [1, 1, 0]]
    """
    width = value.shape[-1]
    lengths_t = torch.as_tensor(lengths if lengths is not None else [width] * value.shape[0], device=value.device)
    tokens = torch.arange(width, device=value.device)[None, :] < lengths_t[:, None]  # [batch, pos]
    if not pairwise:
        return tokens[:, None, :]
    causal = tokens[:, None, None, :] & (tokens[:, None, :, None]) & (
        torch.arange(width, device=value.device)[None, :] <= torch.arange(width, device=value.device)[:, None])
    return causal


def to_positions(value: torch.Tensor, how: str, mask: torch.Tensor) -> torch.Tensor:
    """The positions summed from the quantity ``value`` (the registry's ``sum``), masked entries 0.

    >>> to_positions(torch.tensor([[[1.0, 2.0, 3.0]]]), "exclusive", torch.ones(1, 1, 3, dtype=torch.bool)).tolist()
    [[[0.0, 1.0, 3.0]]]
    """
    q = torch.where(mask, value, 0.0)
    if how == "none":
        return q
    if how in ("inclusive", "exclusive"):
        total = q.cumsum(-1)
        return total if how == "inclusive" else total - q
    suffix = q.flip(-1).cumsum(-1).flip(-1)
    return torch.where(mask, suffix if how == "suffix" else suffix - q, 0.0)


def from_positions(positions: torch.Tensor, original: torch.Tensor, how: str, mask: torch.Tensor) -> torch.Tensor:
    """The quantity whose positions (``to_positions``) are ``positions``; entries that do not change any
    position (masked ones, the exclusive sums' unused end) keep ``original``.

    >>> z = torch.tensor([[[1.0, 2.0, 3.0]]]); every = torch.ones(1, 1, 3, dtype=torch.bool)
    >>> from_positions(to_positions(z, "inclusive", every), z, "inclusive", every).tolist()
    [[[1.0, 2.0, 3.0]]]
    """
    p = torch.where(mask, positions, 0.0)
    if how == "none":
        out = p
    elif how == "inclusive":
        out = p - torch.nn.functional.pad(p[..., :-1], (1, 0))
    elif how == "exclusive":  # q_t = p_{t+1} − p_t; the last real token's q moves no position
        out = torch.nn.functional.pad(p[..., 1:], (0, 1)) - p
        mask = mask & torch.nn.functional.pad(mask[..., 1:], (0, 1), value=False)
    elif how == "suffix":  # q_ij = p_ij − p_i,j+1
        out = p - torch.nn.functional.pad(p[..., 1:], (0, 1))
    else:  # suffix_exclusive: p_ij = Σ_{s>j} q_is, so q_ij = p_i,j−1 − p_ij; the first key's q moves nothing
        out = torch.nn.functional.pad(p[..., :-1], (1, 0)) - p
        mask = mask & torch.nn.functional.pad(mask[..., :-1], (1, 0), value=False)
    return torch.where(mask, out, original)


def _masked_line(positions: torch.Tensor, grid: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The least-squares line a + b·grid through ``positions`` over the masked entries of the last dim."""
    weight = mask.to(positions.dtype)
    count = weight.sum(-1, keepdim=True).clamp(min=1)
    mean_x, mean_y = (grid * weight).sum(-1, keepdim=True) / count, (positions * weight).sum(-1, keepdim=True) / count
    dx = (grid - mean_x) * weight
    variance = (dx * dx).sum(-1, keepdim=True)
    slope = torch.where(variance > 0, (dx * (positions - mean_y)).sum(-1, keepdim=True) / variance.clamp(min=1e-30),
                        0.0)
    return mean_y + slope * (grid - mean_x)


def _masked_range(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    low = torch.where(mask, values, float("inf")).amin(-1, keepdim=True)
    high = torch.where(mask, values, float("-inf")).amax(-1, keepdim=True)
    return torch.where(torch.isfinite(low), low, 0.0), torch.where(torch.isfinite(high), high, 0.0)


def _even_over_range(order_key: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """min + r/(n − 1)·(max − min), r the rank of ``order_key`` among the masked entries."""
    low, high = _masked_range(positions, mask)
    count = mask.sum(-1, keepdim=True).to(positions.dtype)
    key = torch.where(mask, order_key, float("inf"))
    rank = key.argsort(dim=-1, stable=True).argsort(dim=-1).to(positions.dtype)
    return low + rank / (count - 1).clamp(min=1) * (high - low)


def scale_edit(value: torch.Tensor, name: str, edit: PositionEdit, integer: torch.Tensor,
               lengths: list[int] | None, seed: int = 0) -> torch.Tensor:
    """``value`` (the hooked quantity) after the position-scale edit ``name`` in every head;
    ``integer``: the quantity of integer positions, shaped like ``value``.

    >>> from repo_lens.model.registry import position_edit
    >>> z = torch.tensor([[[0.0, 3.0, 1.0, 2.0]]])
    >>> scale_edit(z, "rank", position_edit("repo"), torch.arange(4.0).expand(1, 1, 4), None).tolist()
    [[[0.0, 3.0, 1.0, 2.0]]]
    >>> scale_edit(z, "scaled", position_edit("repo"), torch.arange(4.0).expand(1, 1, 4), None).tolist()
    [[[0.0, 1.0, 2.0, 3.0]]]
    """
    mask = valid_mask(value, lengths, edit.pairwise).expand_as(value)
    positions = to_positions(value.float(), edit.sum, mask)
    grid = to_positions(integer.float(), edit.sum, mask)
    if name == "affine":
        new = _masked_line(positions, grid, mask)
    elif name == "rank":
        new = _even_over_range(positions, positions, mask)
    elif name == "scaled":
        new = _rescaled(grid, positions, mask)
    else:
        step = torch.where(mask, _masked_line(positions, grid, mask) - positions, 0.0)
        size = step.pow(2).sum(-1, keepdim=True).sqrt()
        generator = torch.Generator().manual_seed(seed)
        direction = torch.where(mask, torch.randn(value.shape, generator=generator).to(value.device), 0.0)
        direction = direction / direction.pow(2).sum(-1, keepdim=True).sqrt().clamp(min=1e-30)
        new = positions + size * direction
    if edit.sum == "suffix":  # CoPE's positions are sums of gates in [0, 1]: never below 0 (a hair above,
        new = new.clamp(min=SUFFIX_FLOOR)  # so that the layer's own re-summing cannot round below 0)
    return from_positions(new, value.float(), edit.sum, mask).to(value.dtype)


def _rescaled(grid: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The integer positions mapped linearly onto the positions' range (their direction kept)."""
    low, high = _masked_range(positions, mask)
    grid_low, grid_high = _masked_range(grid, mask)
    span = (grid_high - grid_low)
    return torch.where(span > 0, low + (grid - grid_low) / span.clamp(min=1e-30) * (high - low), positions)
