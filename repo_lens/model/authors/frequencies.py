"""The rotary frequencies of the authors' rotating layers: RoPE's fixed θ_j = base^(−2j/d) (GRAPE's
``Rotary``, FoX's ``RotaryEmbedding``), or GRAPE-M's learned per-plane frequencies
θ_j = exp(log_freq_j / scale) (``MSGRAPECommuting``: scale = ``grape_log_freq_scale``, 16 by default;
``MSGRAPEContextType1``: scale 1), shared by the heads or one spectrum per head."""

from __future__ import annotations

import torch
from torch import nn


class FixedFrequencies(nn.Module):
    """θ_j = 1 / base^(2j/d) in float32 (their ``1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))``).

    >>> FixedFrequencies(n_heads=2, d_head=4, base=100.0)().tolist()
    [[1.0, 0.10000000149011612], [1.0, 0.10000000149011612]]
    """

    def __init__(self, n_heads: int, d_head: int, base: float) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.base = n_heads, d_head, float(base)

    def forward(self, device: torch.device | None = None) -> torch.Tensor:
        """[head, d_head/2] frequencies."""
        exponents = torch.arange(0, self.d_head, 2, device=device).float() / self.d_head
        return (1.0 / (self.base ** exponents)).expand(self.n_heads, -1)


class LearnedFrequencies(nn.Module):
    """θ = exp(log_freq / scale), ``log_freq`` [d_head/2] (shared) or [head, d_head/2], kept in fp32.

    >>> module = LearnedFrequencies(n_heads=2, d_head=4, shared=True, scale=2.0)
    >>> with torch.no_grad():
    ...     _ = module.log_freq.fill_(0.0)
    >>> module().tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self, n_heads: int, d_head: int, shared: bool, scale: float) -> None:
        super().__init__()
        self.n_heads, self.scale = n_heads, float(scale)
        shape = (d_head // 2,) if shared else (n_heads, d_head // 2)
        self.log_freq = nn.Parameter(torch.zeros(shape))

    def forward(self, device: torch.device | None = None) -> torch.Tensor:
        frequencies = torch.exp(self.log_freq.float() / self.scale)
        return frequencies.expand(self.n_heads, -1) if frequencies.dim() == 1 else frequencies
