"""Low-rank adapters (LoRA: Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", arXiv
2106.09685) on a model's linear layers, as weight parametrisations: W + (alpha / rank) · B A, with B
starting at zero so the adapted model starts as the base. Whatever reads ``layer.weight`` sees the sum, so
hooks and the model's own code need no change; :func:`merge_low_rank` folds the adapters in for good
(and :func:`repo_lens.model.loaders.native.delta.add_factors_to_weights` adds saved factors to a state dict).

Example:
    >>> layer = torch.nn.Linear(4, 3, bias=False)
    >>> before = layer.weight.detach().clone()
    >>> names = add_low_rank(torch.nn.ModuleDict({"proj": layer}), ["proj"], rank=2, alpha=4.0)
    >>> bool(torch.equal(layer.weight, before)), names
    (True, ['proj'])
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize


class LowRankDelta(nn.Module):
    """The parametrisation W -> W + scale · B A (A: rank × in, N(0, 1/in); B: out × rank, zeros)."""

    def __init__(self, out_features: int, in_features: int, rank: int, alpha: float) -> None:
        super().__init__()
        self.lora_A = nn.Parameter(torch.randn(rank, in_features) / in_features ** 0.5)
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank))
        self.scale = alpha / rank

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + (self.scale * self.lora_B @ self.lora_A).to(weight.dtype)


def add_low_rank(model: nn.Module, module_names: list[str], *, rank: int, alpha: float) -> list[str]:
    """Adapters of ``rank`` on the weight of each named ``nn.Linear`` of ``model``; returns the names."""
    modules = dict(model.named_modules())
    for name in module_names:
        layer = modules[name]
        out_features, in_features = layer.weight.shape
        delta = LowRankDelta(out_features, in_features, rank, alpha).to(layer.weight.device)
        parametrize.register_parametrization(layer, "weight", delta)
    return module_names


def low_rank_factors(model: nn.Module) -> dict[str, torch.Tensor]:
    """{"<module>.lora_A" / "<module>.lora_B": factor} of every adapted layer (what training changed)."""
    out = {}
    for name, module in model.named_modules():
        if parametrize.is_parametrized(module, "weight"):
            delta = module.parametrizations.weight[0]
            out[f"{name}.lora_A"], out[f"{name}.lora_B"] = delta.lora_A.detach(), delta.lora_B.detach()
    return out


def merge_low_rank(model: nn.Module) -> None:
    """Fold every adapter into its weight and remove the parametrisation (plain ``nn.Linear`` again)."""
    for module in list(model.modules()):
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
