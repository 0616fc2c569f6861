"""TransformerLens' head-level helpers: head labels, composition scores, and the result-hook switch."""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens.FactoredMatrix import FactoredMatrix
from transformer_lens.model_bridge.composition_scores import CompositionScores
from transformer_lens.utilities import composition_scores

from repo_lens.errors import InputError


class HeadMethods:
    """``all_head_labels``, ``all_composition_scores(mode)`` and ``set_use_attn_result`` as TransformerLens 4's
    bridge has them (``OV`` and ``QK`` come from the weight interface; QK is before any rotation)."""

    cfg: Any

    @property
    def all_head_labels(self) -> list[str]:
        """['L0H0', 'L0H1', …] for every layer and head.

        >>> from repo_lens.model.tiny import tiny_model
        >>> tiny_model("repo", n_layers=2).all_head_labels[:3]
        ['L0H0', 'L0H1', 'L0H2']
        """
        return [f"L{layer}H{head}" for layer in range(self.cfg.n_layers) for head in range(self.cfg.n_heads)]

    def all_composition_scores(self, mode: str) -> CompositionScores:
        """Q-, K- or V-composition scores of every earlier head's OV circuit with every later head's QK or
        OV circuit [layer, head, layer, head] (zero unless the first layer comes before the second), as
        TransformerLens' ``CompositionScores``. For RoPE-like mechanisms the QK circuit is before rotation.

        >>> from repo_lens.model.tiny import tiny_model
        >>> tuple(tiny_model("repo", n_layers=2).all_composition_scores("Q").scores.shape)
        (2, 4, 2, 4)
        """
        left: FactoredMatrix = self.OV  # type: ignore[attr-defined]  # the weight interface's
        if mode == "Q":
            right = self.QK  # type: ignore[attr-defined]
        elif mode == "K":
            right = self.QK.T  # type: ignore[attr-defined]
        elif mode == "V":
            right = left
        else:
            raise InputError(f"mode must be one of ['Q', 'K', 'V'], not {mode!r}")
        scores = composition_scores(left, right, broadcast_dims=True)
        layers = torch.arange(self.cfg.n_layers, device=scores.device)
        earlier = layers[:, None, None, None] < layers[None, None, :, None]
        scores = torch.where(earlier, scores, torch.zeros_like(scores))
        return CompositionScores(scores=scores, layer_indices=list(range(self.cfg.n_layers)),
                                 head_labels=self.all_head_labels)

    def QK_for_attn_layers(self) -> tuple[list[int], FactoredMatrix]:  # noqa: N802 (TransformerLens' name)
        """(the attention layers, their QK circuits): every layer of a repo_lens model attends.

        >>> from repo_lens.model.tiny import tiny_model
        >>> layers, qk = tiny_model("repo", n_layers=2).QK_for_attn_layers()
        >>> layers, tuple(qk.shape)
        ([0, 1], (2, 4, 64, 64))
        """
        return list(range(self.cfg.n_layers)), self.QK  # type: ignore[attr-defined]

    def OV_for_attn_layers(self) -> tuple[list[int], FactoredMatrix]:  # noqa: N802 (TransformerLens' name)
        """(the attention layers, their OV circuits): every layer of a repo_lens model attends."""
        return list(range(self.cfg.n_layers)), self.OV  # type: ignore[attr-defined]

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """TransformerLens' switch for caching ``blocks.L.attn.hook_result`` [batch, pos, head, d_model] (a
        d_model vector per head and token: off by default). A hook added to it by name runs either way."""
        without = [index for index, block in enumerate(self.blocks)  # type: ignore[attr-defined]
                   if not hasattr(getattr(block, "attn", None), "hook_result")]
        if use_attn_result and without:
            raise NotImplementedError(f"use_attn_result: the attention of block(s) {without} has no per-head "
                                      "result (no blocks.L.attn.hook_result)")
        self.cfg.use_attn_result = bool(use_attn_result)
