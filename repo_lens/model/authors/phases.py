"""GRAPE-M with a contextual phase as the GRAPE authors' code runs it (``llama-mha-grape-m-ctx.py``,
``MSGRAPEContextType1`` and ``_cumulative_phase``): ω_t = sigmoid(omega_proj(x_t) / scale), one ω per
token shared by the heads (``grape_ctx_per_head``: one per head), Φ_t = Σ_{τ<t} ω_τ; q and k rotate
by Φ_t·θ_j with learned θ (:class:`repo_lens.model.authors.frequencies.LearnedFrequencies`).

Their comments and the paper say ω = softplus(·); the code applies a sigmoid to the logits divided by
``grape_ctx_omega_scale`` (16 by default), so 0 < ω < 1. We follow the code. That is another equation than
the zoo's ``grape-m`` (ω = softplus(W h + b) per head), so it is a kind of its own: ``grape-m-context``.
"""

from __future__ import annotations

import torch
from torch import nn

from repo_lens.model.config import ModelConfig
from repo_lens.model.increments import CumulativePositions


class ContextPhases(CumulativePositions):
    """Positions Φ (an exclusive running sum of ω, published through ``hook_delta``), kind ``grape-m-context``.

    Example:
        >>> cfg = ModelConfig(family="authors", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
        ...                   layer_mechanisms=["grape-m-context"])
        >>> phases = ContextPhases(cfg)
        >>> tuple(phases.omega_proj.weight.shape), tuple(phases(torch.zeros(1, 3, 16)).shape)
        ((1, 16), (1, 2, 3))
    """

    kind = "grape-m-context"
    exclusive = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        options = cfg.extra.get("authors", {})
        per_head = bool(options.get("grape_ctx_per_head", False))
        self.scale = float(options.get("grape_ctx_omega_scale", 16.0))
        self.omega_proj = nn.Linear(cfg.d_model, cfg.n_heads if per_head else 1, bias=True)

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        omega = torch.sigmoid(self.omega_proj(h).float() / self.scale)  # [batch, pos, 1 or head]
        return omega.transpose(1, 2).expand(h.shape[0], self.n_heads, h.shape[1])
