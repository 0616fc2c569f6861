"""RePo's linear design alternatives, as the authors' code runs them (``dynamic_pe_mode``
``multihead_continuous`` and ``continuous``, github ``SakanaAI/repo``, ``modeling_olmo2.py``).

Both map the attention block's input h straight to positions with one bias-free linear map,
``dynamic_map`` (the authors' parameter name), instead of RePo's SwiGLU-gated f:

* ``repo-multihead-continuous``: z = h W, W ∈ R^{d×H}, one position per head and token;
* ``repo-continuous``: z = h w, w ∈ R^{d}, one position per token, rotated by in every head.

Computed in fp32 whatever the weights' dtype (the authors compute z in the model dtype; see the
README's Checkpoints section).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.model.config import ModelConfig


class MultiheadContinuousPositions(nn.Module):
    """z = dynamic_map(h): one learned position per head and token.

    Example:
        >>> cfg = ModelConfig(family="olmo2", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
        ...                   layer_mechanisms=["repo-multihead-continuous"])
        >>> module = MultiheadContinuousPositions(cfg)
        >>> tuple(module.dynamic_map.weight.shape), tuple(module(torch.randn(3, 5, 16)).shape)
        ((2, 16), (3, 2, 5))
    """

    kind = "repo-multihead-continuous"
    role = "rotary"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dynamic_map = nn.Linear(cfg.d_model, cfg.n_heads, bias=False)

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(h.float(), self.dynamic_map.weight.float()).transpose(1, 2)  # [batch, head, pos]


class ContinuousPositions(nn.Module):
    """z = dynamic_map(h): one learned position per token, shared by every head.

    Example:
        >>> cfg = ModelConfig(family="olmo2", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
        ...                   layer_mechanisms=["repo-continuous"])
        >>> z = ContinuousPositions(cfg)(torch.randn(3, 5, 16))
        >>> tuple(z.shape), bool((z[:, 0] == z[:, 1]).all())
        ((3, 2, 5), True)
    """

    kind = "repo-continuous"
    role = "rotary"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.dynamic_map = nn.Linear(cfg.d_model, 1, bias=False)

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        z = F.linear(h.float(), self.dynamic_map.weight.float()).transpose(1, 2)  # [batch, 1, pos]
        return z.expand(-1, self.n_heads, -1)
