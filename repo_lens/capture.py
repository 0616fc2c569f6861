"""Capture the positions every layer uses, through hook_pos, in one forward pass."""

from __future__ import annotations

import numpy as np
import torch

from repo_lens.model.transformer import LensModel


class _AllPositionsCaptured(Exception):
    pass


def position_hook_names(model: LensModel) -> list[str]:
    return [f"blocks.{layer}.attn.hook_pos" for layer in range(model.cfg.n_layers)]


@torch.inference_mode()
def capture_positions(model: LensModel, input_ids: torch.Tensor) -> np.ndarray:
    """positions (n_layers, n_heads, T) float32 for a single sequence ``input_ids`` [1, T].

    Only the hook_pos points get hooks; each stores a detached fp32 copy of its [head, pos] slice.
    The forward stops once the last layer's positions are known: its attention, MLP and the
    logits are not needed.
    """
    captured: dict[int, torch.Tensor] = {}
    last = model.cfg.n_layers - 1

    def keep(layer: int):
        def hook(positions: torch.Tensor, hook) -> None:
            captured[layer] = positions[0].detach().float()
            if layer == last:
                raise _AllPositionsCaptured

        return hook

    hooks = [(name, keep(layer)) for layer, name in enumerate(position_hook_names(model))]
    with model.hooks(fwd_hooks=hooks):
        try:
            model(input_ids)
        except _AllPositionsCaptured:
            pass
    return torch.stack([captured[layer] for layer in range(model.cfg.n_layers)]).cpu().numpy()
