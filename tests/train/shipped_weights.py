"""Shipped weights put into a recipe's model by hand: the independent side of the tests that load a delta."""

from __future__ import annotations

import torch


def put_shipped(model: torch.nn.Module, shipped: dict[str, torch.Tensor]) -> None:
    """Copy ``shipped`` into ``model``: parameters by name, LoRA factors into their weight parametrization."""
    modules, parameters = dict(model.named_modules()), dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in shipped.items():
            if name in parameters:
                parameters[name].copy_(tensor.float())
            else:
                module, factor = name.rsplit(".", 1)
                getattr(modules[module].parametrizations.weight[0], factor).copy_(tensor.float())
