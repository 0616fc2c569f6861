"""TransformerLens' whole-model weight names: stacked per-layer weights, embeddings, factored OV / QK."""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens.FactoredMatrix import FactoredMatrix


def _per_query_head(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[layer, kv_head, ...] -> [layer, head, ...], repeating each GQA key/value head for its query heads."""
    return weight.repeat_interleave(n_heads // weight.shape[1], dim=1)


class WeightInterface:
    """``W_E`` [d_vocab, d_model], ``W_U`` [d_model, d_vocab], ``b_U``; ``W_Q`` / ``W_O`` [layer, head, …],
    ``W_K`` / ``W_V`` [layer, kv_head, …], their biases, ``W_in`` / ``W_gate`` / ``W_out``; ``OV`` and ``QK``
    as FactoredMatrix [layer, head, d_model, d_model] (key/value heads repeated per query head)."""

    blocks: Any
    embed: Any
    unembed: Any
    final_norm: Any
    cfg: Any

    def _stack(self, part: str, name: str) -> torch.Tensor:
        return torch.stack([getattr(getattr(block, part), name) for block in self.blocks], dim=0)

    W_E = property(lambda self: self.embed.weight)
    W_U = property(lambda self: self.unembed.weight.T)
    W_Q = property(lambda self: self._stack("attn", "W_Q"))
    W_K = property(lambda self: self._stack("attn", "W_K"))
    W_V = property(lambda self: self._stack("attn", "W_V"))
    W_O = property(lambda self: self._stack("attn", "W_O"))
    b_Q = property(lambda self: self._stack("attn", "b_Q"))
    b_K = property(lambda self: self._stack("attn", "b_K"))
    b_V = property(lambda self: self._stack("attn", "b_V"))
    b_O = property(lambda self: self._stack("attn", "b_O"))
    W_in = property(lambda self: self._stack("mlp", "W_in"))
    W_gate = property(lambda self: self._stack("mlp", "W_gate"))
    W_out = property(lambda self: self._stack("mlp", "W_out"))
    b_in = property(lambda self: self._stack("mlp", "b_in"))
    b_out = property(lambda self: self._stack("mlp", "b_out"))
    ln_final = property(lambda self: self.final_norm)

    @property
    def b_U(self) -> torch.Tensor:
        bias = getattr(self.unembed, "bias", None)
        return torch.zeros_like(self.unembed.weight[:, 0]) if bias is None else bias

    @property
    def OV(self) -> FactoredMatrix:
        """W_V @ W_O per layer and head, factored [layer, head, d_model, d_model]."""
        return FactoredMatrix(_per_query_head(self.W_V, self.cfg.n_heads), self.W_O)

    @property
    def QK(self) -> FactoredMatrix:
        """W_Q @ W_Kᵀ per layer and head, factored [layer, head, d_model, d_model] (before any rotation)."""
        return FactoredMatrix(self.W_Q, _per_query_head(self.W_K, self.cfg.n_heads).transpose(-2, -1))

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """The output biases added to the residual stream before ``layer`` (and its attention's, with ``mlp_input``)."""
        total = torch.zeros(self.cfg.d_model, device=self.W_E.device, dtype=self.W_E.dtype)
        for index in range(layer + (1 if mlp_input else 0)):
            total = total + self.blocks[index].attn.b_O
            if include_mlp_biases and index < layer:
                total = total + self.blocks[index].mlp.b_out
        return total

    def tokens_to_residual_directions(self, tokens: Any) -> torch.Tensor:
        """The unembedding column(s) of ``tokens`` (a string, id or LongTensor): [..., d_model]."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)  # type: ignore[attr-defined]
        if isinstance(tokens, torch.Tensor) and tokens.numel() > 1:
            return self.W_U[:, tokens].movedim(0, -1)
        return self.W_U[:, int(tokens)]
