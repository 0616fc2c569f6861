"""TransformerLens' per-layer weight names on an attention module with ``q_proj`` / ``k_proj`` / ``v_proj`` /
``o_proj`` linear maps (views of the same parameters, so edits and gradients reach the model)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _weight(projection: nn.Module) -> torch.Tensor:
    inner: Any = getattr(projection, "linear", projection)  # the authors' token-shift projections wrap a Linear
    return inner.weight


def _bias(projection: nn.Module, heads: int, d_head: int) -> torch.Tensor:
    inner: Any = getattr(projection, "linear", projection)
    bias = getattr(inner, "bias", None)
    if bias is None:
        return torch.zeros(heads, d_head, dtype=inner.weight.dtype, device=inner.weight.device)
    return bias.view(heads, d_head)


class AttentionWeights:
    """``W_Q`` [head, d_model, d_head], ``W_K`` / ``W_V`` [kv_head, d_model, d_head], ``W_O`` [head, d_head,
    d_model] and the biases ``b_Q`` [head, d_head], ``b_K`` / ``b_V`` [kv_head, d_head], ``b_O`` [d_model]
    (zeros where the projection has none), as TransformerLens names them.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> attn = tiny_model("rope").blocks[0].attn
        >>> tuple(attn.W_Q.shape), tuple(attn.W_O.shape)
        ((4, 64, 16), (4, 16, 64))
    """

    n_heads: int
    d_head: int
    q_proj: nn.Module
    k_proj: nn.Module
    v_proj: nn.Module
    o_proj: nn.Module

    def _split(self, projection: nn.Module) -> torch.Tensor:
        weight = _weight(projection)
        return weight.view(-1, self.d_head, weight.shape[-1]).transpose(1, 2)

    @property
    def W_Q(self) -> torch.Tensor:
        return self._split(self.q_proj)

    @property
    def W_K(self) -> torch.Tensor:
        return self._split(self.k_proj)

    @property
    def W_V(self) -> torch.Tensor:
        return self._split(self.v_proj)

    @property
    def W_O(self) -> torch.Tensor:
        weight = _weight(self.o_proj)
        return weight.T.reshape(self.n_heads, self.d_head, weight.shape[0])

    @property
    def b_Q(self) -> torch.Tensor:
        return _bias(self.q_proj, self.n_heads, self.d_head)

    @property
    def b_K(self) -> torch.Tensor:
        return _bias(self.k_proj, _weight(self.k_proj).shape[0] // self.d_head, self.d_head)

    @property
    def b_V(self) -> torch.Tensor:
        return _bias(self.v_proj, _weight(self.v_proj).shape[0] // self.d_head, self.d_head)

    @property
    def b_O(self) -> torch.Tensor:
        weight = _weight(self.o_proj)
        bias = getattr(self.o_proj, "bias", None)
        return torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device) if bias is None else bias
