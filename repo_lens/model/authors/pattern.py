"""Softmax attention of the authors' layers, with the attention pattern published only when hooked."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformer_lens.hook_points import HookPoint

from repo_lens.model.attention import hooked_attention


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, bias: torch.Tensor | None,
           hook_pattern: HookPoint, hook_attn_scores: HookPoint) -> torch.Tensor:
    """softmax(q·k/√d + bias) v over the ``allowed`` keys, [batch, head, query, d_head]. Hooks on
    ``hook_attn_scores`` / ``hook_pattern`` see the scores and probabilities
    (:func:`repo_lens.model.attention.hooked_attention`).

    >>> q = k = v = torch.ones(1, 1, 2, 4)
    >>> attend(q, k, v, torch.ones(2, 2, dtype=torch.bool).tril(), None, HookPoint(), HookPoint()).shape
    torch.Size([1, 1, 2, 4])
    """
    if bias is None:
        plain = allowed.shape[0] == allowed.shape[1]
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=None if plain else allowed, is_causal=plain)
    else:
        mask = bias.masked_fill(~allowed, float("-inf"))
        z = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask).to(v.dtype)
    return hooked_attention(q, k, v, z, allowed, bias, hook_attn_scores, hook_pattern)
