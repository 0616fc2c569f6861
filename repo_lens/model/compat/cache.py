"""TransformerLens' ``ActivationCache`` on weights as the checkpoint has them: the norms' weights included.

TransformerLens' cache applies a norm to a stack of residual components by dividing by the cached scale
alone: ``fold_ln`` has moved the norm's weight into the next matrix (``W_U``, ``W_Q``, …). A repo_lens
model keeps its checkpoint's weights, so here ``apply_ln_to_stack`` divides by the cached scale and
multiplies by the norm's weight: each component's share of what the norm hands on. With the unfolded
``W_U`` that gives the numbers TransformerLens' bridge gives with ``fold_ln`` on the same checkpoint, and
the attributions of every component add up to the logit (and a logit difference). Everything built on
it follows: ``decompose_resid``, ``accumulated_resid``, ``stack_head_results``, ``stack_neuron_results``
and ``get_full_resid_decomposition`` with ``apply_ln=True``, and ``logit_attrs``.
:meth:`~repo_lens.model.compat.weights.WeightInterface.fold_final_norm` stays available; after it the
final norm's weight is 1 and nothing changes.

A norm with a bias is refused: its bias belongs to no component (TransformerLens moves it into the next
bias). Per-head results are refused as residual components of blocks whose norm follows attention
(OLMo-2's ``ln1_post``): there ``attn_out`` = norm(Σ heads + b_O), not a sum over heads;
``decompose_resid`` (which reads ``attn_out``) still adds up.
"""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens import ActivationCache
from transformer_lens.utilities import Slice

from repo_lens.errors import InputError
from repo_lens.model.former_names import current_hook_name


def _differs_from(value: Any, fill: float) -> bool:
    """Whether ``value`` is a tensor with an entry other than ``fill`` (a norm's weight other than 1, bias other than 0)."""
    return isinstance(value, torch.Tensor) and not torch.equal(value, torch.full_like(value, fill))


def _norm_after_attention(model: Any, layers: int) -> list[int]:
    return [index for index, block in enumerate(model.blocks[:layers])
            if "after_attention" in getattr(block, "_norm_at", {})]


class LensActivationCache(ActivationCache):
    """TransformerLens' ``ActivationCache``, with the norms' weights applied as described in the module docstring.

    Example:
        >>> import torch
        >>> from repo_lens.model.tiny import tiny_model
        >>> model = tiny_model("repo")
        >>> _ = torch.nn.init.uniform_(model.final_norm.weight, 0.5, 1.5)
        >>> logits, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]))
        >>> parts = cache.decompose_resid(pos_slice=-1)
        >>> attributions = cache.logit_attrs(parts, tokens=5, incorrect_tokens=6, pos_slice=-1)
        >>> bool(torch.allclose(attributions.sum(0), logits[:, -1, 5] - logits[:, -1, 6], atol=1e-5))
        True
    """

    def __getitem__(self, key: Any) -> torch.Tensor:
        """TransformerLens' lookup; a hook's former name (``blocks.1.attn.positions.hook_delta``) finds it too, and warns."""
        if isinstance(key, str) and key not in self.cache_dict:
            key = current_hook_name(key)
        return super().__getitem__(key)

    def _target_norm(self, layer: int | None, mlp_input: bool) -> tuple[Any, str]:
        """The norm a stack enters at ``layer`` (``n_layers``: the final norm) and its name in messages."""
        model: Any = self.model
        if layer is None or layer in (-1, model.cfg.n_layers):
            return model.final_norm, "the final norm"
        name = "ln2" if mlp_input else "ln1"
        block = model.blocks[layer]
        if name not in block.norm_aliases().values():
            raise InputError(
                f"block {layer} has no norm before its {'MLP' if mlp_input else 'attention'} (its norms are "
                f"{sorted(block.norm_aliases().values())}: OLMo-2 normalises each sublayer's output), so the stack "
                "enters it as it is: use it without apply_ln_to_stack")
        return getattr(block, name), f"block {layer}'s {name}"

    def _norm_weight(self, layer: int | None, mlp_input: bool) -> torch.Tensor | None:
        norm, description = self._target_norm(layer, mlp_input)
        if _differs_from(getattr(norm, "bias", None), 0.0):
            fix = ("call model.fold_final_norm() first (it moves the bias into b_U)" if description == "the final norm"
                   else "add the bias to the stack's sum yourself")
            raise InputError(f"{description} has a bias, which belongs to no residual component, so the stack "
                             f"would not add up to the norm's output: {fix}")
        weight = getattr(norm, "weight", None)
        return weight.detach() if isinstance(weight, torch.Tensor) and _differs_from(weight, 1.0) else None

    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice: Any = None, batch_slice: Any = None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> torch.Tensor:
        """TransformerLens' ``apply_ln_to_stack`` (divide by the cached scale), times the norm's weight.

        With ``recompute_ln`` TransformerLens runs the final norm itself, weight included.
        """
        arguments = dict(pos_slice=pos_slice, batch_slice=batch_slice, has_batch_dim=has_batch_dim)
        if recompute_ln and layer in (None, -1, self.model.cfg.n_layers):
            return super().apply_ln_to_stack(residual_stack, layer, mlp_input, recompute_ln=True, **arguments)
        weight = self._norm_weight(layer, mlp_input)
        scaled = super().apply_ln_to_stack(residual_stack, layer, mlp_input, recompute_ln=recompute_ln, **arguments)
        return scaled if weight is None else scaled * weight.to(scaled.dtype)

    def _stack_neuron_results_apply_ln_projected(self, layer: int, pos_slice: Slice, neuron_slice: Slice,
                                                 project_2d: torch.Tensor, mlp_input: bool = False) -> torch.Tensor:
        # TransformerLens' fused norm and projection (no [neuron, d_model] stack): (x / s) · w ⊙ p
        weight = self._norm_weight(layer, mlp_input)
        if weight is not None:
            project_2d = project_2d * weight.to(project_2d.dtype)[:, None]
        return super()._stack_neuron_results_apply_ln_projected(layer, pos_slice, neuron_slice, project_2d,
                                                                mlp_input=mlp_input)

    def stack_head_results(self, layer: int = -1, *args: Any, **kwargs: Any) -> Any:
        layers = self.model.cfg.n_layers if layer == -1 else layer
        post = _norm_after_attention(self.model, layers)
        if post:
            raise InputError(
                f"heads' results are not residual stream components in layer(s) {post}: their norm follows attention "
                "(attn_out = norm(sum of heads + b_O)), so the heads do not add up to attn_out; decompose by block "
                "with cache.decompose_resid(), or read each head's result before the norm at blocks.L.attn.hook_result")
        return super().stack_head_results(layer, *args, **kwargs)
