"""Rotary rotation as the GRAPE and FoX authors' code writes it: the two halves of each head,
y1 = x1·cos + x2·sin, y2 = −x1·sin + x2·cos (a rotation by −angle, the transpose of the usual
RoPE; q·k still depends only on the difference of two positions), angle = position · frequency."""

from __future__ import annotations

import torch


def rotation_angles(positions: torch.Tensor, frequencies: torch.Tensor) -> torch.Tensor:
    """[batch, head, pos, d_head/2] angles in fp32 from positions [batch, head, pos] and per-head
    frequencies [head, d_head/2].

    >>> rotation_angles(torch.tensor([[[0.0, 2.0]]]), torch.tensor([[1.0, 0.5]]))[0, 0].tolist()
    [[0.0, 0.0], [2.0, 1.0]]
    """
    return positions.float()[..., None] * frequencies.float()[None, :, None, :]


def rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x [batch, head, pos, d_head] rotated by ``angles`` [batch, head, pos, d_head/2] (cos and sin
    in fp32, the result cast back to x's dtype as their ``type_as``).

    >>> (rotate(torch.tensor([[[[1.0, 0.0]]]]), torch.tensor([[[[torch.pi / 2]]]])).round() + 0.0).tolist()
    [[[[0.0, -1.0]]]]
    """
    cos, sin = angles.cos(), angles.sin()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1).to(x.dtype)
