"""Position mechanisms: each assigns every token, in every head, the position its layer rotates by.

A "rotary" mechanism maps the attention block's input h [batch, pos, d_model] and the index of
the first new token (non-zero when decoding with a KV cache) to positions [batch, head, pos], at
which q and k are rotated. ``state`` is the layer's slot in the KV cache (running sums continue
from it); ``shared`` carries model-level increments (``lpi``). The other mechanisms have modules
of their own (``increments.py``: running sums of learned increments; ``additive.py``: biases added
to the attention logits); ``registry.py`` lists every mechanism and what it is.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.model.config import ModelConfig


class _FixedPositions(nn.Module):
    """Base of the mechanisms whose positions do not depend on h: the same in every head and batch row."""

    role = "rotary"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads

    def values(self, offset: int, pos: int, device: torch.device) -> torch.Tensor:
        """[pos] positions of the tokens offset..offset+pos-1."""
        raise NotImplementedError

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        batch, pos, _ = h.shape
        return self.values(offset, pos, h.device).expand(batch, self.n_heads, pos)


class IntegerPositions(_FixedPositions):
    """RoPE's linear assignment: token t sits at t (the same in every head)."""

    kind = "rope"

    def values(self, offset: int, pos: int, device: torch.device) -> torch.Tensor:
        return torch.arange(offset, offset + pos, device=device, dtype=torch.float32)


class ConstantPositions(_FixedPositions):
    """NoPE: every token at one constant position, so the rotation cancels in q·k (RePo App. A)."""

    kind = "nope"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.value = float(cfg.nope_position)

    def values(self, offset: int, pos: int, device: torch.device) -> torch.Tensor:
        return torch.full((1,), self.value, device=device).expand(pos)


class RepoPositions(nn.Module):
    """RePo's f (Eq. 4–6): r = Swish(h W_g) ⊙ (h W_c) in R^{d_p}; one z = r W_z per head.

    Parameter names follow the published checkpoint (gate_map, content_map, final_map, no
    biases). Computed in fp32 whatever the weights' dtype.
    """

    kind = "repo"
    role = "rotary"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d_position = int(cast(int, cfg.d_position))  # the config sets it (d_model // 8 when not given)
        self.gate_map = nn.Linear(cfg.d_model, d_position, bias=False)
        self.content_map = nn.Linear(cfg.d_model, d_position, bias=False)
        self.final_map = nn.Linear(d_position, cfg.n_heads, bias=False)

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        h32 = h.float()
        with torch.autocast(h.device.type, enabled=False):  # fp32 under autocast too: z reaches the hundreds
            gate = F.linear(h32, self.gate_map.weight.float())
            content = F.linear(h32, self.content_map.weight.float())
            z = F.linear(F.silu(gate) * content, self.final_map.weight.float())
        return z.transpose(1, 2)  # [batch, head, pos]
