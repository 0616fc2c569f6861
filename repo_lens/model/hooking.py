"""When a hook point is asked for, and whether its hook changed what it saw.

A few hook points hold values the fast path never computes (the attention pattern and scores, a norm's
scale); the model computes those only when something asks: a TransformerLens forward or backward hook,
a torch module hook, or an nnsight trace that reads or writes the hook's output.
"""

from __future__ import annotations

import torch
from transformer_lens.hook_points import HookPoint

_NNSIGHT_STATE = "__nnsight__"  # where nnsight keeps a wrapped module's routing state


def _nnsight_wants(point: HookPoint) -> bool:
    state = point.__dict__.get(_NNSIGHT_STATE)
    if state is None:
        return False
    interleaver, _, locations = state.active()
    if interleaver is None:
        return False
    return any(location in interleaver.parked or location in interleaver.observers for location in locations)


def wants(point: HookPoint) -> bool:
    """True when a hook, a backward hook or an nnsight trace waits on ``point``.

    >>> point = HookPoint()
    >>> wants(point)
    False
    >>> point.add_hook(lambda tensor, hook: None)
    >>> wants(point)
    True
    """
    return bool(point._forward_hooks or point._forward_pre_hooks or point._backward_hooks
                or point._backward_pre_hooks or _nnsight_wants(point))


def through(point: HookPoint, tensor: torch.Tensor) -> torch.Tensor | None:
    """``point``'s output for ``tensor`` when its hooks replaced it, edited it in place, or need its
    gradient (a backward hook); None when the hooks only read it.

    >>> point = HookPoint()
    >>> point.add_hook(lambda tensor, hook: tensor.mul_(2))
    >>> through(point, torch.ones(2))
    tensor([2., 2.])
    """
    inference = torch.is_inference(tensor)
    before = tensor.clone() if inference else tensor._version
    hooked = point(tensor)
    if hooked is not tensor or point._backward_hooks:
        return hooked
    if inference:
        return None if torch.equal(before, tensor) else tensor
    return None if tensor._version == before else tensor
