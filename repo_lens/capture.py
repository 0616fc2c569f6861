"""Capture the positions every layer uses, through hook_pos, in one forward pass."""

from __future__ import annotations

import numpy as np
import torch

from repo_lens.model.transformer import LensModel


class _AllPositionsCaptured(Exception):
    pass


def position_hook_names(model: LensModel) -> list[str]:
    return [f"blocks.{layer}.attn.hook_pos" for layer in range(model.cfg.n_layers)]


def increment_hook_names(model: LensModel) -> dict[int, str]:
    """Layers whose mechanism publishes the increments it sums (``...attn.positions.hook_delta``)."""
    names = {layer: f"blocks.{layer}.attn.positions.hook_delta" for layer in range(model.cfg.n_layers)}
    return {layer: name for layer, name in names.items() if name in model.hook_dict}


@torch.inference_mode()
def capture_positions(model: LensModel, input_ids: torch.Tensor,
                      increments: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """positions (n_layers, n_heads, T) float32 for a single sequence ``input_ids`` [1, T].

    Only the hook_pos (and, when ``increments`` is a dict, hook_delta) points get hooks; each
    stores a detached fp32 copy of its [head, pos] slice; ``increments`` is filled with
    layer -> (n_heads, T). The forward stops once the last layer's positions are known: its
    attention output, MLP and the logits are not needed.
    """
    captured: dict[int, torch.Tensor] = {}
    deltas: dict[int, torch.Tensor] = {}
    last = model.cfg.n_layers - 1

    def keep(layer: int):
        def hook(positions: torch.Tensor, hook) -> None:
            captured[layer] = positions[0].detach().float()
            if layer == last:
                raise _AllPositionsCaptured

        return hook

    def keep_delta(layer: int):
        def hook(delta: torch.Tensor, hook) -> None:
            deltas[layer] = delta[0].detach().float()

        return hook

    hooks = [(name, keep(layer)) for layer, name in enumerate(position_hook_names(model))]
    if increments is not None:
        hooks += [(name, keep_delta(layer)) for layer, name in increment_hook_names(model).items()]
    with model.hooks(fwd_hooks=hooks):
        try:
            model(input_ids)
        except _AllPositionsCaptured:
            pass
    if increments is not None:
        increments.update({layer: delta.cpu().numpy() for layer, delta in deltas.items()})
    return torch.stack([captured[layer] for layer in range(model.cfg.n_layers)]).cpu().numpy()
