"""FoX's forget gates as the authors' code computes them (``ForgettingAttentionLayer`` in github
``zhixuan-lin/forgetting-transformer`` and in GRAPE's ``model/fox.py``): log f_t = logsigmoid(logit_t)
with ``fgate_type`` "full" (logit = fgate_proj(x_t), data-dependent), "bias_only" or "fixed" (logit =
fgate_bias, one per head) or "none" (f = 1); logit_ij += Σ_{l=j+1}^{i} log f_l.

Published like the zoo's ``fox``: δ_t = −log f_t through ``hook_delta``, positions = Σ_{s≤t} δ_s
(``hook_pos``), bias = position_j − position_i.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.errors import CheckpointError
from repo_lens.model.additive import KeyMinusQueryBias
from repo_lens.model.config import ModelConfig

FGATE_TYPES = ("full", "bias_only", "fixed", "none")


class ForgetGates(KeyMinusQueryBias, nn.Module):
    """FoX forget gates of one layer (kind ``fox``), with the authors' parameter names.

    Example:
        >>> cfg = ModelConfig(family="authors", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
        ...                   layer_mechanisms=["fox"], extra={"authors": {"fgate_type": "none"}})
        >>> ForgetGates(cfg)(torch.randn(1, 3, 16)).tolist()
        [[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]
    """

    kind = "fox"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.fgate_type = str(cfg.extra.get("authors", {}).get("fgate_type", "full"))
        if self.fgate_type not in FGATE_TYPES:
            raise CheckpointError(f"unknown FoX fgate_type {self.fgate_type!r}; the authors' code offers {FGATE_TYPES}")
        if self.fgate_type == "full":
            self.fgate_proj = nn.Linear(cfg.d_model, cfg.n_heads, bias=True)
        elif self.fgate_type != "none":
            self.fgate_bias = nn.Parameter(torch.zeros(cfg.n_heads))
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_delta = HookPoint()

    def _log_forget(self, h: torch.Tensor) -> torch.Tensor:
        batch, pos, _ = h.shape
        if self.fgate_type == "none":
            return torch.zeros(batch, self.n_heads, pos, device=h.device)
        logit = self.fgate_proj(h) if self.fgate_type == "full" else self.fgate_bias.expand(batch, pos, -1)
        return F.logsigmoid(logit.transpose(1, 2).float())

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.cumsum(self.hook_delta(-self._log_forget(h)), dim=-1)
        if state is not None and "carry" in state:
            positions = positions + state["carry"]
        if state is not None:
            state["carry"] = positions[..., -1:].detach()
        return positions
