"""GRAPE-A with gated rates as the GRAPE authors' code runs it (``llama-mha-grape-a-keygated.py``,
``-querygated.py``, ``-querykeygated.py``): logit_ij += −(i − j)·ω_h·r_ij with
ω_h = softplus(omega_h)·m_h (m_h: ALiBi's slope of head h) and the rate r_ij = g^k_j (key-gated),
g^q_i (query-gated) or g^q_i + g^k_j (query+key-gated); g^k_j = softplus(û_h·k_j/√d),
g^q_i = softplus(v̂_h·q_i/√d), û, v̂ the L2-normalised gate vectors (``*_l2_norm``), k and q after
the qk-RMSNorm.

Their docstrings write b(i, j) = (j − i)·ω_h·softplus(u_h^T k_j); the code also scales ω by ALiBi's
slopes, normalises u and v and divides the gate logits by √d. We follow the code.

Published as path sums (:mod:`repo_lens.model.authors.potentials`): ψ(i, l) = b(i, l − 1) − b(i, l),
ψ(i, 0) = 0, so positions seen from the last query start at 0 and, with every rate 1, are ALiBi's
ω_h·t. Inside a zoo model (``LensModel`` of family olmo2/llama, where keys do not reach the mechanism)
the kind runs query-gated.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.errors import CheckpointError
from repo_lens.model.alibi import alibi_slopes
from repo_lens.model.authors.potentials import EdgePotentials
from repo_lens.model.config import ModelConfig

GATINGS = {"key": ("u",), "query": ("v",), "querykey": ("u", "v")}


def softplus_inverse(value: float) -> float:
    """x with softplus(x) = value (value > 0).

    >>> round(softplus_inverse(1.0), 6)
    0.541325
    """
    return math.log(math.expm1(value))


class GatedRates(EdgePotentials):
    """GRAPE-A key-, query- or query+key-gated (kind ``grape-a``); ``cfg.extra["authors"]["gating"]``."""

    kind = "grape-a"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        options = cfg.extra.get("authors", {})
        self.gating = str(options.get("gating", "query"))
        if self.gating not in GATINGS:
            raise CheckpointError(f"unknown GRAPE-A gating {self.gating!r}; the GRAPE authors' variants: {sorted(GATINGS)}")
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.slopes = tuple(alibi_slopes(cfg.n_heads))
        self.omega = nn.Parameter(torch.full((cfg.n_heads,), softplus_inverse(1.0)))
        self.normalise = {name: (bool(options.get(f"{name}_l2_norm", True)), float(options.get(f"{name}_l2_eps", 1e-6)))
                          for name in GATINGS[self.gating]}
        for name in GATINGS[self.gating]:
            setattr(self, name, nn.Parameter(torch.randn(cfg.n_heads, cfg.d_head) / math.sqrt(cfg.d_head)))

    def _gate(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """softplus(ŵ_h·x/√d) [batch, head, pos] for x [batch, head, pos, d_head]."""
        vector = getattr(self, name).float()
        l2_norm, eps = self.normalise[name]
        if l2_norm:
            vector = F.normalize(vector, p=2, dim=-1, eps=eps)
        logits = (x * vector.to(x.dtype)[None, :, None, :]).sum(dim=-1, dtype=torch.float32) / math.sqrt(x.shape[-1])
        return F.softplus(logits)

    def rate_bias(self, q: torch.Tensor, k: torch.Tensor | None, n_past: int) -> torch.Tensor:
        """b(i, j) = −dist(i, j)·ω_h·r_ij [batch, head, query, key] in fp32, as their code computes it."""
        n_keys = n_past + q.shape[2]
        if "u" in GATINGS[self.gating] and (k is None or k.shape[2] != n_keys):
            raise ValueError("key-gated GRAPE-A needs every key; run it in the GRAPE authors' attention")
        query_index = torch.arange(n_past, n_keys, device=q.device)
        dist = (query_index[:, None] - torch.arange(n_keys, device=q.device)[None, :]).clamp_min(0).float()
        slopes = torch.tensor(self.slopes, dtype=torch.float32, device=q.device)
        omega = (F.softplus(self.omega.float()) * slopes)[None, :, None, None]
        rate: float | torch.Tensor = 0.0
        if "v" in GATINGS[self.gating]:
            rate = rate + self._gate(q, "v")[..., :, None]
        if "u" in GATINGS[self.gating]:
            assert k is not None  # checked above: key gating needs the keys
            rate = rate + self._gate(k, "u")[..., None, :]
        return -dist[None, None] * omega * rate

    def edge_potentials(self, q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
                        h: torch.Tensor | None, n_past: int, state: dict | None) -> torch.Tensor:
        bias = self.rate_bias(q, k, n_past)
        return torch.cat((torch.zeros_like(bias[..., :1]), bias[..., :-1] - bias[..., 1:]), dim=-1)

    def forward(self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The zoo attention's contextual call (queries only): (bias, last-query positions)."""
        psi = self.edge_potentials(q, None, None, None, allowed.shape[1] - allowed.shape[0], None)
        return self.bias_and_positions(psi, allowed)
