"""Small building blocks shared by both block families: RMSNorm and the SwiGLU MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """RMS normalisation in fp32.

    OLMo-2 multiplies by the weight before casting back to the input dtype, Llama after;
    ``weight_before_cast`` picks which (identical in fp32, they differ in bf16).
    """

    def __init__(self, dim: int, eps: float, weight_before_cast: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.weight_before_cast = weight_before_cast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight_before_cast:
            return (self.weight * normed).to(dtype)
        return self.weight * normed.to(dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, d_model: int, d_mlp: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_mlp, bias=bias)
        self.up_proj = nn.Linear(d_model, d_mlp, bias=bias)
        self.down_proj = nn.Linear(d_mlp, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
