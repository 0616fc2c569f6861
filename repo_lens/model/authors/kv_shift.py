"""The GRAPE and FoX authors' data-dependent key/value shift (``ShiftLinear``; their torch path
``token_shift_torch``): out_t = α_t ⊙ y_{t−1} + (1 − α_t) ⊙ y_t per head, y = linear(x),
α = sigmoid(shift_proj(x)) [batch, pos, head], y_{−1} = 0 (or the cached token's y when decoding)."""

from __future__ import annotations

import torch
from torch import nn


class ShiftLinear(nn.Module):
    """A linear projection followed by the authors' token shift, with their parameter names
    (``linear``, ``shift_proj``, no biases).

    ``unshifted_single_token``: a one-token input with no cached predecessor comes out unshifted
    (GRAPE's ``ShiftLinear`` does so: its shift runs only when seq_len > 1; FoX's package applies
    (1 − α) there too).

    Example:
        >>> shift = ShiftLinear(8, 4, n_heads=2, unshifted_single_token=True)
        >>> out, last = shift(torch.randn(1, 3, 8))
        >>> tuple(out.shape), tuple(last.shape)
        ((1, 3, 4), (1, 1, 4))
    """

    def __init__(self, d_in: int, d_out: int, n_heads: int, unshifted_single_token: bool) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.unshifted_single_token = unshifted_single_token
        self.linear = nn.Linear(d_in, d_out, bias=False)
        self.shift_proj = nn.Linear(d_in, n_heads, bias=False)

    def forward(self, x: torch.Tensor, previous: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [batch, pos, d_in]; ``previous``: the projection y of the token before x's first (a KV cache).
        Returns (the shifted projection [batch, pos, d_out], y of x's last token [batch, 1, d_out])."""
        batch, pos, _ = x.shape
        out = self.linear(x)
        if pos == 1 and previous is None and self.unshifted_single_token:
            return out, out[:, -1:]
        alpha = torch.sigmoid(self.shift_proj(x).float())[..., None]  # [batch, pos, head, 1]
        per_head = out.view(batch, pos, self.n_heads, -1)
        before = torch.zeros_like(per_head[:, :1]) if previous is None else previous.view(batch, 1, self.n_heads, -1)
        shifted = torch.cat((before.to(per_head.dtype), per_head[:, :-1]), dim=1)
        result = shifted * alpha + per_head * (1.0 - alpha)
        return result.to(out.dtype).reshape(batch, pos, -1), out[:, -1:]
