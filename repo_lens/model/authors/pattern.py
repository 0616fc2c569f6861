"""Softmax attention of the authors' layers, with the attention pattern published only when hooked."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformer_lens.hook_points import HookPoint


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, bias: torch.Tensor | None,
           hook_pattern: HookPoint) -> torch.Tensor:
    """softmax(q·k/√d + bias) v over the ``allowed`` keys, [batch, head, query, d_head]. A hook on
    ``hook_pattern`` sees the probabilities; the output is recomputed only if the hook replaced them.

    >>> q = k = v = torch.ones(1, 1, 2, 4)
    >>> attend(q, k, v, torch.ones(2, 2, dtype=torch.bool).tril(), None, HookPoint()).shape
    torch.Size([1, 1, 2, 4])
    """
    if bias is None:
        plain = allowed.shape[0] == allowed.shape[1]
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=None if plain else allowed, is_causal=plain)
    else:
        mask = bias.masked_fill(~allowed, float("-inf"))
        z = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask).to(v.dtype)
    if not hook_pattern.fwd_hooks:
        return z
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias
    pattern = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    hooked = hook_pattern(pattern)
    return z if hooked is pattern else (hooked @ v.float()).to(v.dtype)
