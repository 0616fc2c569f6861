"""TransformerLens' names for a block's norms and MLP weights, and for the norms' hook points."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import cast

import torch
from torch import nn

# where a block's norm sits -> TransformerLens' name for it (OLMo-2's norms follow the sublayers: ln1_post, ln2_post)
NORM_NAMES = {"before_attention": "ln1", "before_mlp": "ln2", "after_attention": "ln1_post", "after_mlp": "ln2_post"}


class BlockNames:
    """``ln1`` / ``ln2`` (pre-norm blocks) or ``ln1_post`` / ``ln2_post`` (OLMo-2) for a block's norms.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> block = tiny_model("rope", family="llama").blocks[0]
        >>> block.ln1 is block.input_layernorm
        True
    """

    _norm_at: dict[str, str]

    def _norm_named(self, tl_name: str) -> nn.Module:
        for place, name in self._norm_at.items():
            if NORM_NAMES[place] == tl_name:
                return getattr(self, name)
        raise AttributeError(f"this block has no {tl_name}; its norms are {sorted(self.norm_aliases().values())}")

    def norm_aliases(self) -> dict[str, str]:
        """Each norm's attribute name -> its TransformerLens name."""
        return {name: NORM_NAMES[place] for place, name in self._norm_at.items()}

    ln1 = property(lambda self: self._norm_named("ln1"))
    ln2 = property(lambda self: self._norm_named("ln2"))
    ln1_post = property(lambda self: self._norm_named("ln1_post"))
    ln2_post = property(lambda self: self._norm_named("ln2_post"))


class MLPWeights:
    """``W_gate`` / ``W_in`` [d_model, d_mlp] and ``W_out`` [d_mlp, d_model] of a gated MLP, with biases
    ``b_in`` [d_mlp] and ``b_out`` [d_model] (zeros where there are none)."""

    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear

    W_gate = property(lambda self: self.gate_proj.weight.T)
    W_in = property(lambda self: self.up_proj.weight.T)
    W_out = property(lambda self: self.down_proj.weight.T)

    @property
    def b_in(self) -> torch.Tensor:
        bias = self.up_proj.bias
        return torch.zeros_like(self.up_proj.weight[:, 0]) if bias is None else bias

    @property
    def b_out(self) -> torch.Tensor:
        bias = self.down_proj.bias
        return torch.zeros_like(self.down_proj.weight[:, 0]) if bias is None else bias


def transformer_lens_hook_names(model: nn.Module) -> dict[str, str]:
    """Hook name by module path -> TransformerLens' name, for the hooks whose names differ (the norms').

    >>> from repo_lens.model.tiny import tiny_model
    >>> names = transformer_lens_hook_names(tiny_model("rope", family="llama"))
    >>> names["blocks.0.input_layernorm.hook_scale"], names["final_norm.hook_normalized"]
    ('blocks.0.ln1.hook_scale', 'ln_final.hook_normalized')
    """
    renames = {"final_norm": "ln_final"}
    for layer, block in enumerate(cast("Iterable[nn.Module]", getattr(model, "blocks", []))):
        if isinstance(block, BlockNames):
            for name, alias in block.norm_aliases().items():
                renames[f"blocks.{layer}.{name}"] = f"blocks.{layer}.{alias}"
    from transformer_lens.hook_points import HookPoint

    result = {}
    for path in (name for name, module in model.named_modules() if isinstance(module, HookPoint)):
        match = re.match(r"^(.*)\.(hook_\w+)$", path)
        if match and match.group(1) in renames:
            result[path] = f"{renames[match.group(1)]}.{match.group(2)}"
    return result
