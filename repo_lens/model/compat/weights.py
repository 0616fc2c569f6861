"""TransformerLens' whole-model weight names: stacked per-layer weights, embeddings, factored OV / QK."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformer_lens.FactoredMatrix import FactoredMatrix


class Embed(nn.Embedding):
    """The token embedding, with TransformerLens' name for its matrix: ``W_E`` [d_vocab, d_model]."""

    W_E = property(lambda self: self.weight)


class Unembed(nn.Linear):
    """The unembedding, with TransformerLens' names: ``W_U`` [d_model, d_vocab] and ``b_U`` [d_vocab] (zeros
    where the checkpoint has no bias)."""

    W_U = property(lambda self: self.weight.T)

    @property
    def b_U(self) -> torch.Tensor:
        return torch.zeros_like(self.weight[:, 0]) if self.bias is None else self.bias


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

    @torch.no_grad()
    def fold_final_norm(self) -> None:
        """Fold the final norm's weight (and bias) into the unembedding, as TransformerLens' ``fold_ln`` does
        for ``ln_final``: W_U ← diag(w) W_U, b_U ← b_U + b W_U, then w = 1 and b = 0. The logits do not
        change (up to rounding); direct logit attributions (``cache.logit_attrs``, ``apply_ln_to_stack``)
        then add up to them. Tied embeddings are untied first, so ``W_E`` stays as it was.

        Example:
            >>> import torch
            >>> from repo_lens.model.tiny import tiny_model
            >>> model = tiny_model("repo")
            >>> _ = torch.nn.init.uniform_(model.final_norm.weight, 0.5, 1.5)
            >>> before = model(torch.tensor([[1, 2, 3]]))
            >>> model.fold_final_norm()
            >>> torch.allclose(model(torch.tensor([[1, 2, 3]])), before, atol=1e-5), bool((model.ln_final.weight == 1).all())
            (True, True)
        """
        norm, unembed = self.final_norm, self.unembed
        weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)
        if weight is None and bias is None:
            return
        matrix = unembed.weight.detach().clone()  # [vocab, d_model]; a copy unties it from the embedding
        if bias is not None:
            shift = matrix.float() @ bias.detach().float()
            if unembed.bias is None:
                unembed.bias = torch.nn.Parameter(shift.to(matrix.dtype))
            else:
                unembed.bias.add_(shift.to(unembed.bias.dtype))
            bias.zero_()
        if weight is not None:
            matrix = (matrix.float() * weight.detach().float()).to(matrix.dtype)
            weight.fill_(1.0)
        unembed.weight = torch.nn.Parameter(matrix, requires_grad=unembed.weight.requires_grad)

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

    def get_params(self) -> dict[str, torch.Tensor]:
        """Every weight under TransformerLens' names (``embed.W_E``, ``blocks.0.attn.W_Q``, …, grouped keys
        and values repeated to every query head), read by TransformerLens' own ``get_params``.

        Example:
            >>> from repo_lens.model.tiny import tiny_model
            >>> tuple(tiny_model("rope").get_params()["blocks.0.attn.W_K"].shape)  # [head, d_model, d_head]
            (4, 64, 16)
        """
        from transformer_lens.model_bridge.get_params_util import get_bridge_params

        return get_bridge_params(self)
