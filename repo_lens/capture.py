"""Capture the positions every layer uses, through hook_pos, in one forward pass; and the lock that
makes one model safe to use from several threads (hooks are state of the model, shared by every call)."""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch

from repo_lens.errors import MemoryLimitError
from repo_lens.model.hooking import wants
from repo_lens.model.transformer import LensModel

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)

_LOCKS: weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def forward_lock(model: torch.nn.Module) -> threading.RLock:
    """The one re-entrant lock of ``model``: hold it around any forward pass that attaches hooks.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> model = tiny_model("rope")
        >>> forward_lock(model) is forward_lock(model)
        True
    """
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock


def _locked_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    with forward_lock(self):
        return type(self).forward(self, *args, **kwargs)


def _locked_run_with_hooks(self: Any, *args: Any, **kwargs: Any) -> Any:
    with forward_lock(self):
        return type(self).run_with_hooks(self, *args, **kwargs)


def _locked_run_with_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
    with forward_lock(self):
        return type(self).run_with_cache(self, *args, **kwargs)


@contextmanager
def _locked_hooks(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
    with forward_lock(self), type(self).hooks(self, *args, **kwargs) as attached:
        yield attached


_GUARDED = {"forward": _locked_forward, "hooks": _locked_hooks, "run_with_hooks": _locked_run_with_hooks,
            "run_with_cache": _locked_run_with_cache}


def is_out_of_memory(error: BaseException) -> bool:
    """True for a failed allocation: torch's OutOfMemoryError, MemoryError, or the CPU allocator's RuntimeError."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def forward_bytes(model: LensModel, n_tokens: int) -> int:
    """About the peak activation bytes of one forward pass over ``n_tokens`` tokens (one layer's
    attention scores and softmax in fp32, its MLP and residual tensors in the model's dtype).

    >>> from repo_lens.model.tiny import tiny_model
    >>> forward_bytes(tiny_model("rope"), 1000) > 0
    True
    """
    cfg = model.cfg
    itemsize = next(model.parameters()).element_size()
    scores = 2 * int(cfg.n_heads) * n_tokens * n_tokens * 4
    return scores + n_tokens * (3 * int(cfg.d_mlp) + 8 * int(cfg.d_model)) * itemsize


def memory_limit_error(model: LensModel, what: str, n_tokens: int, remedies: str) -> MemoryLimitError:
    """The project's error for a forward pass over ``n_tokens`` tokens that ran out of memory; frees CUDA's cache."""
    parameter = next(model.parameters())
    if parameter.device.type == "cuda":
        torch.cuda.empty_cache()
    dtype = str(parameter.dtype).replace("torch.", "")
    need = forward_bytes(model, n_tokens) / 2**30
    return MemoryLimitError(
        f"{what} of {n_tokens} tokens ran out of memory on {parameter.device} ({dtype}); one forward pass needs "
        f"about {need:.2f} GiB of activations besides the weights (attention grows with the square of the length). "
        f"Remedies: {remedies}; or load the model on another device (device='cuda') or in a smaller dtype "
        "(dtype='bfloat16')"
    )


def guard_model(model: ModuleT) -> ModuleT:
    """Make ``model``'s forward, ``hooks``, ``run_with_hooks`` and ``run_with_cache`` hold
    :func:`forward_lock` (idempotent): a forward in one thread then never fires another thread's hooks.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> model = guard_model(tiny_model("rope"))
        >>> _, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]))
        >>> tuple(cache["blocks.0.attn.hook_pos"].shape)
        (1, 4, 3)
    """
    for name, locked in _GUARDED.items():
        if hasattr(type(model), name) and name not in vars(model):
            object.__setattr__(model, name, types.MethodType(locked, model))
    return model


class _AllPositionsCaptured(Exception):
    pass


def position_hook_names(model: LensModel) -> list[str]:
    return [f"blocks.{layer}.attn.hook_pos" for layer in range(model.cfg.n_layers)]


def increment_hook_names(model: LensModel) -> dict[int, str]:
    """Layers whose mechanism publishes the increments it sums (``...attn.mechanism.hook_delta``)."""
    names = {layer: f"blocks.{layer}.attn.mechanism.hook_delta" for layer in range(model.cfg.n_layers)}
    return {layer: name for layer, name in names.items() if name in model.hook_dict}


@torch.inference_mode()
def capture_positions(model: LensModel, input_ids: torch.Tensor,
                      increments: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """positions (n_layers, n_heads, T) float32 for a single sequence ``input_ids`` [1, T]
    (:func:`capture_batch` of one).

    Only the hook_pos, hook_delta and hook_query_delta points get hooks; each stores a detached fp32
    copy; ``increments``, when a dict, is filled with layer -> (n_heads, T). The forward stops once
    the last layer's positions are known (its attention output, MLP and the logits are not needed),
    unless another hook or an nnsight trace is waiting on a hook point.
    """
    [(positions, deltas)] = capture_batch(model, input_ids, [int(input_ids.shape[1])])
    if increments is not None:
        increments.update(deltas)
    return positions


def query_increment_hook_names(model: LensModel) -> dict[int, str]:
    """Layers whose positions are seen from one query (``...attn.mechanism.hook_query_delta``, every
    query's increments): in a padded batch each sequence reads its own last query there."""
    names = {layer: f"blocks.{layer}.attn.mechanism.hook_query_delta" for layer in range(model.cfg.n_layers)}
    return {layer: name for layer, name in names.items() if name in model.hook_dict}


@torch.inference_mode()
def capture_batch(model: LensModel, input_ids: torch.Tensor,
                  lengths: list[int]) -> list[tuple[np.ndarray, dict[int, np.ndarray]]]:
    """Per sequence of a right-padded batch ``input_ids`` [B, T] whose b-th sequence holds
    ``lengths[b]`` real tokens: (positions (n_layers, n_heads, lengths[b]) float32, increments
    layer -> (n_heads, lengths[b])), equal to capturing each sequence alone.

    Attention is causal, so no real token sees the pads after it and no running sum includes them.
    Layers whose positions are seen from the last query (``query_increment_hook_names``) are rebuilt
    from each sequence's own last real query. The forward stops once the last layer's positions are known.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> (positions, _), (short, _) = capture_batch(tiny_model("rope"), torch.tensor([[5, 6, 7], [5, 6, 0]]), [3, 2])
        >>> positions.shape, short[0, 0].tolist()
        ((4, 4, 3), [0.0, 1.0])
    """
    batch = int(input_ids.shape[0])
    if len(lengths) != batch or not all(0 < length <= input_ids.shape[1] for length in lengths):
        raise ValueError(f"lengths {lengths} must give 1..{input_ids.shape[1]} real tokens for each of {batch} sequences")
    captured: dict[int, torch.Tensor] = {}
    deltas: dict[int, torch.Tensor] = {}
    last_rows = torch.as_tensor(lengths, device=input_ids.device) - 1
    listening = _others_listen(model)
    # a layer whose positions do not depend on the input (RoPE's integers, NoPE's constant) is not copied
    # from the device: its positions are known, unless a hook someone else attached may change them
    known = {} if listening else fixed_position_layers(model)
    hooks = _batch_capture_hooks(model, last_rows, captured, deltas, stop_early=not listening, skip=set(known))
    with forward_lock(model), model.hooks(fwd_hooks=hooks):
        try:
            model(input_ids)
        except _AllPositionsCaptured:
            pass
    if input_ids.device.type == "cuda":  # the copies to pinned host memory were queued without waiting
        torch.cuda.current_stream(input_ids.device).synchronize()
    n_tokens = int(input_ids.shape[1])
    for layer, mechanism in known.items():
        values: torch.Tensor = getattr(mechanism, "values")(0, n_tokens, torch.device("cpu"))
        captured[layer] = values.float().expand(batch, model.cfg.n_heads, n_tokens)
    positions = torch.stack([captured[layer] for layer in range(model.cfg.n_layers)], dim=1).numpy()
    increments = {layer: delta.numpy() for layer, delta in deltas.items()}
    return [(np.ascontiguousarray(positions[b, :, :, :length]),
             {layer: np.ascontiguousarray(delta[b, :, :length]) for layer, delta in increments.items()})
            for b, length in enumerate(lengths)]


def fixed_position_layers(model: LensModel) -> dict[int, torch.nn.Module]:
    """Layer -> position mechanism, for the layers whose positions do not depend on the input (they
    answer ``values(offset, n_tokens, device)``: RoPE's integers, NoPE's constant).

    >>> from repo_lens.model.tiny import tiny_model
    >>> sorted(fixed_position_layers(tiny_model("repo")))
    [0, 1]
    """
    return {layer: block.attn.mechanism for layer, block in enumerate(model.blocks)
            if callable(getattr(block.attn.mechanism, "values", None))}


def _to_host(values: torch.Tensor) -> torch.Tensor:
    """``values`` as fp32 on the CPU; from a GPU, queued as a copy into pinned memory that does not wait
    for the device (the caller synchronises once, after the forward)."""
    values = values.detach().float()
    if values.device.type != "cuda":
        return values
    host = torch.empty(values.shape, dtype=torch.float32, pin_memory=True)
    host.copy_(values, non_blocking=True)
    return host


def _others_listen(model: LensModel) -> bool:
    """Whether a hook point has a hook or an nnsight request already (someone else's: the forward must run to the end)."""
    return any(wants(point) for point in model.hook_dict.values())


def _batch_capture_hooks(model: LensModel, last_rows: torch.Tensor, captured: dict[int, torch.Tensor],
                         deltas: dict[int, torch.Tensor], stop_early: bool = True,
                         skip: Collection[int] = ()) -> list[tuple[str | Callable[..., Any], Callable[..., Any]]]:
    """The hooks of :func:`capture_batch`: they fill ``captured`` (layer -> positions [B, H, T]) and
    ``deltas`` (layer -> increments [B, H, T]) with detached fp32 copies on the CPU (from a GPU, queued
    into pinned memory as each layer is done, so the copies overlap the rest of the forward), reading
    layers seen from the last query at each sequence's ``last_rows``, and (``stop_early``) stop the
    forward after the last layer's positions. Layers in ``skip`` (positions known) are not copied."""
    last = model.cfg.n_layers - 1
    from_last_query = query_increment_hook_names(model)
    batch = int(last_rows.shape[0])

    def keep(layer: int):
        def hook(positions: torch.Tensor, hook) -> None:
            if layer not in from_last_query and layer not in skip:
                captured[layer] = _to_host(positions)
            if layer == last and stop_early:
                raise _AllPositionsCaptured

        return hook

    def keep_delta(layer: int):
        def hook(delta: torch.Tensor, hook) -> None:
            if layer not in from_last_query:
                deltas[layer] = _to_host(delta)

        return hook

    def keep_query_delta(layer: int):
        def hook(per_query: torch.Tensor, hook) -> None:
            rows = per_query[torch.arange(batch, device=per_query.device), :, last_rows].detach().float()  # [B, H, keys]
            deltas[layer] = _to_host(rows)
            captured[layer] = _to_host(torch.cumsum(rows, dim=-1))

        return hook

    hooks: list[tuple[str | Callable[..., Any], Callable[..., Any]]] = [
        (name, keep(layer)) for layer, name in enumerate(position_hook_names(model))]
    hooks += [(name, keep_delta(layer)) for layer, name in increment_hook_names(model).items()]
    hooks += [(name, keep_query_delta(layer)) for layer, name in from_last_query.items()]
    return hooks
