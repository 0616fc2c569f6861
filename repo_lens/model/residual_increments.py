"""Per-layer learned increments exactly as the learned-increments post's code computes them.

"Learned position increments" (Brendan Long; github.com/brendanlong/learned-position-increments-experiment)
gives each layer l its own bounded DeltaMLP that reads the residual stream *entering* the block through a
normalisation of its own:

    δ_l = max_delta · sigmoid(fc2(gelu(fc1(RMSNorm_l(x_l))))),   positions = Σ_{s≤t} δ_s

where x_l is the residual stream before the block's own attention norm and RMSNorm_l has a learnable weight
and eps = float32's machine epsilon (``nn.RMSNorm(dim)`` in an fp32 forward).

- ``lpi-resid``: one δ per token, shared by every head of the layer;
- ``lpi-resid-head``: one δ per token and head (the post's ``per_head_delta``), each head its own running sum.

``lpi-layer`` differs: its DeltaMLP has no norm of its own and reads the block's normed attention input.
These modules say so with ``reads_residual = True``: the block passes them the residual stream itself.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from repo_lens.model.config import ModelConfig
from repo_lens.model.increments import CumulativePositions, DeltaMLP

FP32_EPS = torch.finfo(torch.float32).eps


class DeltaNorm(nn.Module):
    """The DeltaMLP's own RMSNorm: x / √(mean(x²) + eps) · weight, in fp32, eps = float32's machine epsilon."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + FP32_EPS) * self.weight.float()


class ResidualIncrementPositions(CumulativePositions):
    """``lpi-resid``: δ = max_delta · sigmoid(DeltaMLP(RMSNorm(x))) from the residual stream entering the block,
    one δ per token (initialised so δ = 1, integer RoPE, everywhere)."""

    kind = "lpi-resid"
    reads_residual = True  # the block passes the residual stream entering it, not the normed attention input
    per_head = False

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.max_delta = float(cfg.lpi_max_delta)
        self.norm = DeltaNorm(cfg.d_model)
        self.delta_mlp = DeltaMLP(cfg.d_model, cfg.lpi_hidden_dim, cfg.n_heads if self.per_head else 1,
                                  output_bias=math.log(1.0 / (self.max_delta - 1.0)))

    def start_at_integers(self) -> None:
        """δ = 1 for every input: the output weight 0 and its bias logit(1/max_delta)."""
        self.delta_mlp.fc_in.reset_parameters()
        nn.init.zeros_(self.delta_mlp.fc_in.bias)
        nn.init.zeros_(self.delta_mlp.fc_out.weight)
        nn.init.constant_(self.delta_mlp.fc_out.bias, math.log(1.0 / (self.max_delta - 1.0)))

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):  # fp32 under autocast too: the increments are summed
            delta = self.max_delta * torch.sigmoid(self.delta_mlp(self.norm(h)))  # [batch, pos, 1 or head]
        return delta.transpose(1, 2).expand(h.shape[0], self.n_heads, h.shape[1])


class ResidualHeadIncrementPositions(ResidualIncrementPositions):
    """``lpi-resid-head``: as ``lpi-resid`` with one δ per token and head, each head its own running sum."""

    kind = "lpi-resid-head"
    per_head = True
