"""The attention scores and pattern, materialised only for the hooks that ask for them."""

from __future__ import annotations

import torch
from transformer_lens.hook_points import HookPoint

from repo_lens.model.hooking import through, wants


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """Boolean [n_queries, n_keys], True where query i (the last n_queries of the keys) may attend.

    >>> causal_mask(2, 3, torch.device("cpu")).tolist()
    [[True, True, False], [True, True, True]]
    """
    query_index = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]
    return torch.arange(n_keys, device=device)[None, :] <= query_index


def hooked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fused: torch.Tensor,
                     allowed: torch.Tensor | None, bias: torch.Tensor | None, hook_attn_scores: HookPoint,
                     hook_pattern: HookPoint) -> torch.Tensor:
    """The attention output [batch, head, query, d_head] given the fused kernel's ``fused``: the scores
    (q·k/√d_head + bias, −inf where masked, fp32) and the pattern pass through their hooks when asked for,
    and the output is recomputed from the pattern only if a hook replaced or edited either, or a backward
    hook needs their gradient; otherwise ``fused`` itself, so reading hooks leave the output bit-identical.
    With autograd on, a reading hook's pattern is on the gradient's path (``retain_grad`` works): the
    output keeps the fused value and takes its gradient through the pattern.

    >>> q = k = v = torch.ones(1, 1, 2, 4)
    >>> out = hooked_attention(q, k, v, v, None, None, HookPoint(), HookPoint())
    >>> out is v
    True
    """
    if not (wants(hook_attn_scores) or wants(hook_pattern)):
        return fused
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias
    if allowed is None:
        allowed = causal_mask(q.shape[2], k.shape[2], q.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    edited_scores = through(hook_attn_scores, scores)
    if edited_scores is not None:
        scores = edited_scores
    pattern = scores.softmax(dim=-1)
    edited_pattern = through(hook_pattern, pattern)
    if edited_pattern is None and edited_scores is None:
        if not (torch.is_grad_enabled() and pattern.requires_grad):
            return fused
        # the hooks only read, but a gradient may be asked of what they saw (retain_grad): the output stays
        # the fused kernel's, bit for bit, and its gradient flows through the pattern instead of the kernel
        explicit = (pattern @ v.float()).to(v.dtype)
        return fused.detach() + (explicit - explicit.detach())
    pattern = pattern if edited_pattern is None else edited_pattern
    return (pattern @ v.float()).to(v.dtype)
