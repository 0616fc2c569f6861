"""TransformerLens' ``ActivationCache``, refusing the readouts that would be silently wrong on a repo_lens model.

TransformerLens' cache applies a norm to a stack of residual components by dividing by the cached scale
alone: it assumes ``fold_ln`` has moved the norm's weight into the next matrix. A repo_lens model keeps
its checkpoint's weights, so direct logit attributions through the final norm are refused until
:meth:`~repo_lens.model.compat.weights.WeightInterface.fold_final_norm` has folded it (as TransformerLens
refuses an unfolded bridge). Per-head results are refused as residual components of blocks whose norm
follows attention (OLMo-2's ``ln1_post``): there ``attn_out`` = norm(Σ heads + b_O), not a sum over heads;
``decompose_resid`` (which reads ``attn_out``) still adds up.
"""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import ActivationCache

from repo_lens.errors import InputError


def _differs_from(value: Any, fill: float) -> bool:
    """Whether ``value`` is a tensor with an entry other than ``fill`` (a norm's weight other than 1, bias other than 0)."""
    return isinstance(value, torch.Tensor) and not torch.equal(value, torch.full_like(value, fill))


def final_norm_is_identity(model: Any) -> bool:
    """Whether the model's final norm has no weight other than 1 and no bias other than 0."""
    norm = getattr(model, "final_norm", None)
    return not (_differs_from(getattr(norm, "weight", None), 1.0) or _differs_from(getattr(norm, "bias", None), 0.0))


def _norm_after_attention(model: Any, layers: int) -> list[int]:
    return [index for index, block in enumerate(model.blocks[:layers])
            if "after_attention" in getattr(block, "_norm_at", {})]


class LensActivationCache(ActivationCache):
    """TransformerLens' ``ActivationCache`` with the refusals described in the module docstring.

    Example:
        >>> import torch
        >>> from repo_lens.model.tiny import tiny_model
        >>> model = tiny_model("repo")
        >>> _ = torch.nn.init.uniform_(model.final_norm.weight, 0.5, 1.5)
        >>> _, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]))
        >>> cache.apply_ln_to_stack(cache.decompose_resid())
        Traceback (most recent call last):
        ...
        repo_lens.errors.InputError: ...fold_final_norm()...
    """

    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          *args: Any, **kwargs: Any) -> torch.Tensor:
        n_layers = self.model.cfg.n_layers
        if kwargs.get("recompute_ln"):  # TransformerLens runs the final norm module itself: its weight included
            return super().apply_ln_to_stack(residual_stack, layer, mlp_input, *args, **kwargs)
        if layer is None or layer in (-1, n_layers):
            if not final_norm_is_identity(self.model):
                raise InputError(
                    "direct logit attribution divides each component by the final norm's scale and leaves out the "
                    "norm's weight, so the attributions would not add up to the logits: call "
                    "model.fold_final_norm() first (it folds the weight into W_U; the logits do not change), as "
                    "TransformerLens asks for compatibility mode with fold_ln")
            return super().apply_ln_to_stack(residual_stack, layer, mlp_input, *args, **kwargs)
        name = "ln2" if mlp_input else "ln1"
        block = self.model.blocks[layer]
        if name not in block.norm_aliases().values():
            raise InputError(
                f"block {layer} has no norm before its {'MLP' if mlp_input else 'attention'} (its norms are "
                f"{sorted(block.norm_aliases().values())}: OLMo-2 normalises each sublayer's output), so the stack "
                "enters it as it is: use it without apply_ln_to_stack")
        if _differs_from(getattr(getattr(block, name), "weight", None), 1.0):
            raise InputError(
                f"applying block {layer}'s {name} to a stack would leave out the norm's weight (TransformerLens "
                "assumes fold_ln has moved it into the next matrices; repo_lens models keep them as loaded): "
                f"divide by cache['blocks.{layer}.{name}.hook_scale'] and multiply by the norm's weight yourself")
        return super().apply_ln_to_stack(residual_stack, layer, mlp_input, *args, **kwargs)

    def stack_head_results(self, layer: int = -1, *args: Any, **kwargs: Any) -> Any:
        layers = self.model.cfg.n_layers if layer == -1 else layer
        post = _norm_after_attention(self.model, layers)
        if post:
            raise InputError(
                f"heads' results are not residual stream components in layer(s) {post}: their norm follows attention "
                "(attn_out = norm(sum of heads + b_O)), so the heads do not add up to attn_out; decompose by block "
                "with cache.decompose_resid(), or read each head's result before the norm at blocks.L.attn.hook_result")
        return super().stack_head_results(layer, *args, **kwargs)
