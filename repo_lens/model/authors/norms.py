"""RMS norms over each head's channels, as the GRAPE and FoX authors' code applies them to q, k and
the attention output: in fp32, the weight multiplied in fp32 before the cast back (their ``rms_norm``)."""

from __future__ import annotations

import torch
from torch import nn


class HeadRMSNorm(nn.Module):
    """RMS norm of x [..., head, d_head] over d_head.

    ``per_head=False``: one weight [d_head] shared by every head (GRAPE's ``q_rms``/``k_rms``/``subln``,
    FoX's ``qk_norm_share_param_across_head``); ``per_head=True``: a weight [head·d_head] (FoX's
    ``GroupNorm`` with one group per head, applied to the flat projection).

    Example:
        >>> norm = HeadRMSNorm(n_heads=2, d_head=4, per_head=True, eps=1e-5)
        >>> tuple(norm.weight.shape), tuple(norm(torch.randn(3, 5, 2, 4)).shape)
        ((8,), (3, 5, 2, 4))
    """

    def __init__(self, n_heads: int, d_head: int, per_head: bool, eps: float) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.per_head, self.eps = n_heads, d_head, per_head, eps
        self.weight = nn.Parameter(torch.ones(n_heads * d_head if per_head else d_head))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        weight = self.weight.float()
        if self.per_head:
            weight = weight.view(self.n_heads, self.d_head)
        return (normed * weight).to(x.dtype)
