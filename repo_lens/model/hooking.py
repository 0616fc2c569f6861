"""When a hook point is asked for, and whether its hook changed what it saw.

A few hook points hold values the fast path never computes (the attention pattern and scores, a norm's
scale); the model computes those only when something asks: a TransformerLens forward or backward hook,
a torch module hook, or a library that wraps the hook point's ``forward`` to see its output. nnsight wraps
every module of a model it wraps; which ones a running trace waits on is kept in nnsight 0.8's
interleaver, which is read where it is there, as a speed-up only: with any other layout every wrapped
hook point is computed (correct, and at the published 16 × 16 shape and 4,096 tokens 14× slower).
"""

from __future__ import annotations

from typing import cast

import torch
from transformer_lens.hook_points import HookPoint


def _wrapper_waits(point: HookPoint) -> bool:
    """Whether the library that wrapped ``point``'s forward waits on its output now. nnsight 0.8 keeps a
    module's routing under ``__nnsight__`` and a running trace's locations in its interleaver (not public
    API): read when present; any other wrapper or layout is assumed to wait."""
    try:
        interleaver, _, locations = point.__dict__["__nnsight__"].active()
        if interleaver is None:  # wrapped, but no trace is running
            return False
        return any(location in interleaver.parked or location in interleaver.observers for location in locations)
    except Exception:  # noqa: BLE001 (another wrapper, or another nnsight: compute the value, which is always right)
        return True


def wants(point: HookPoint) -> bool:
    """True when a hook or a backward hook waits on ``point``, or the library that wrapped its ``forward``
    (nnsight) does.

    >>> wants(HookPoint())
    False
    """
    return bool(point._forward_hooks or point._forward_pre_hooks or point._backward_hooks
                or point._backward_pre_hooks or ("forward" in point.__dict__ and _wrapper_waits(point)))


def through(point: HookPoint, tensor: torch.Tensor) -> torch.Tensor | None:
    """``point``'s output for ``tensor`` when its hooks replaced it, edited it in place, or need its
    gradient (a backward hook); None when the hooks only read it.

    >>> through(HookPoint(), torch.ones(2)) is None
    True
    """
    inference = torch.is_inference(tensor)
    before = tensor.clone() if inference else tensor._version
    hooked = point(tensor)
    if hooked is not tensor or point._backward_hooks:
        return hooked
    if inference:
        return None if torch.equal(cast(torch.Tensor, before), tensor) else tensor
    return None if tensor._version == before else tensor


def editable(point: HookPoint, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` ready for ``point``'s hooks when something asks for it: its own memory (an expanded
    tensor, such as RoPE's positions, cannot be edited in place) and, under a backward hook, a
    gradient even where no parameter feeds it; ``tensor`` itself otherwise.

    >>> positions = torch.arange(3.0).expand(2, 3)
    >>> editable(HookPoint(), positions) is positions
    True
    """
    if not wants(point):
        return tensor
    if 0 in tensor.stride():
        tensor = tensor.contiguous()
    if point._backward_hooks and torch.is_grad_enabled() and tensor.is_floating_point() and not tensor.requires_grad:
        tensor = tensor.detach().requires_grad_(True)
    return tensor


def project_heads(o_proj: torch.nn.Module, z: torch.Tensor, hook_result: HookPoint) -> torch.Tensor:
    """``o_proj`` of the heads' outputs ``z`` [batch, pos, head, d_head]: one matmul, unless something waits
    on ``hook_result`` [batch, pos, head, d_model], each head's share of the output (TransformerLens'
    ``hook_result``); then the (possibly edited) shares summed, plus the bias.

    >>> o_proj = torch.nn.Linear(4, 3, bias=False)
    >>> z = torch.randn(1, 2, 2, 2)
    >>> torch.allclose(project_heads(o_proj, z, HookPoint()), o_proj(z.reshape(1, 2, 4)))
    True
    """
    batch, pos, heads, d_head = z.shape
    if not wants(hook_result):
        return o_proj(z.reshape(batch, pos, heads * d_head))
    weight = cast(torch.Tensor, o_proj.weight)  # a Linear's [d_model, head × d_head]
    edited = through(hook_result, torch.einsum("bphd,mhd->bphm", z, weight.view(weight.shape[0], heads, d_head)))
    if edited is None:  # the hooks only read the shares: the output as without them, bit for bit
        return o_proj(z.reshape(batch, pos, heads * d_head))
    out = edited.sum(-2)
    bias = getattr(o_proj, "bias", None)
    return out if bias is None else out + bias


class AttentionHooks:
    """The hook points every attention layer has (the zoo's, the GRAPE/FoX authors' and the CoPE authors'), in the
    order its forward reaches them; their shapes and what they hold: :mod:`repo_lens.model.hook_shapes`. An
    attention layer (an ``nn.Module``) mixes this in and calls :meth:`add_attention_hooks` in its ``__init__``.

    >>> class Layer(AttentionHooks, torch.nn.Module):
    ...     def __init__(self) -> None:
    ...         super().__init__()
    ...         self.add_attention_hooks()
    >>> layer = Layer()
    >>> isinstance(layer.hook_pattern, HookPoint), len(list(layer.children()))
    (True, 10)
    """

    hook_pos: HookPoint
    hook_q: HookPoint
    hook_k: HookPoint
    hook_v: HookPoint
    hook_rot_q: HookPoint
    hook_rot_k: HookPoint
    hook_attn_scores: HookPoint
    hook_pattern: HookPoint
    hook_z: HookPoint
    hook_result: HookPoint

    def add_attention_hooks(self) -> None:
        for name in ATTENTION_HOOKS:
            setattr(self, name, HookPoint())


ATTENTION_HOOKS: tuple[str, ...] = tuple(AttentionHooks.__annotations__)
