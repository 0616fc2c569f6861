"""The hookable decoder: embedding, blocks, final norm, unembedding."""

from __future__ import annotations

import warnings
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.families import block_class
from repo_lens.model.cache import KVCache
from repo_lens.model.compat.forward import layer_range
from repo_lens.model.compat.weights import Embed, Unembed
from repo_lens.model.compat.interface import TransformerLensInterface
from repo_lens.model.config import ModelConfig
from repo_lens.model.decay import Decay
from repo_lens.model.former_names import rename_former_keys
from repo_lens.model.increments import DeltaTable
from repo_lens.model.hooking import editable
from repo_lens.model.registry import build_decay, family_attention, mechanism_class
from repo_lens.model.layers import RMSNorm


class LensModel(TransformerLensInterface):
    """A decoder-only transformer with a position mechanism per layer, as a TransformerLens model
    (``run_with_cache`` returning an ``ActivationCache``, ``run_with_hooks``, ``to_tokens``, ``generate``,
    ``W_Q`` …: :class:`repo_lens.model.compat.interface.TransformerLensInterface`). Its hooks take
    TransformerLens' names and shapes where they hold the same thing (``hook_q`` is q_proj's output,
    ``hook_rot_q`` the rotated queries); the documentation's hook-points table lists every one. With a decay
    (``cfg.decay``, :mod:`repo_lens.model.decay`) it computes log α once from the embeddings (``hook_log_forget``)
    and every layer adds the decay's bias to its scores.

    Example:
        >>> cfg = ModelConfig(family="olmo2", vocab_size=50, d_model=32, n_layers=3, n_heads=4,
        ...                   d_mlp=64, layer_mechanisms=["rope", "repo", "repo"])
        >>> model = LensModel(cfg)
        >>> logits, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]), names_filter=lambda n: n.endswith("hook_pos"))
        >>> logits.shape, cache["blocks.1.attn.hook_pos"].shape
        (torch.Size([1, 3, 50]), torch.Size([1, 4, 3]))
    """

    decay: Decay  # the model's decay (repo_lens.model.decay), set only where cfg.decay is not "none"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg.vocab_size, cfg.d_model)
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_embed = HookPoint()
        shared = shared_modules(cfg)
        if shared is not None:  # the learned-increments post's shared DeltaMLP (read from the embeddings) or δ table
            self.shared_delta = shared
            if _per_head(shared):
                self.hook_head_delta = HookPoint()
            else:
                self.hook_delta = HookPoint()
        decay = build_decay(cfg)
        if decay is not None:  # a decay (the learned-increments post's): log α of each head from the embeddings
            self.decay = cast(Decay, decay)
            self.hook_log_forget = HookPoint()
        block = block_class(cfg.family)
        self.blocks = nn.ModuleList(block(cfg, layer) for layer in range(cfg.n_layers))
        self.final_norm = RMSNorm(cfg.d_model, cfg.rms_norm_eps, weight_before_cast=block.WEIGHT_BEFORE_CAST)
        self.unembed = Unembed(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.unembed.weight = self.embed.weight
        self._register_load_state_dict_pre_hook(rename_former_keys)  # checkpoints saved under former names load
        self.setup()

    ROWS_FROM = True  # forward takes rows_from

    def forward_logits(self, input_ids: torch.Tensor, cache: KVCache | None = None, rows_from: int = 0,
                       start_at_layer: int | None = None, stop_at_layer: int | None = None) -> torch.Tensor:
        """LongTensor [batch, pos] -> logits [batch, pos, vocab]. With ``cache``, input_ids are the
        tokens after the cached ones and the cache is extended in place. With ``rows_from``, only the
        logits of tokens ``rows_from``.. ([batch, pos − rows_from, vocab]): the last block runs its
        queries and MLP for those tokens alone (every token still fills the cache). With
        ``start_at_layer`` the input is the residual stream entering that block; with ``stop_at_layer``
        the output is the residual stream entering that block."""
        offset = cache.seq_len if cache is not None else 0
        start, stop = layer_range(len(self.blocks), start_at_layer, stop_at_layer)
        decay: dict[str, torch.Tensor] = {}
        if start_at_layer is None:
            x = self.hook_embed(self.embed(input_ids))
            shared = self._hooked_shared(self.shared_increments(x, input_ids)) if hasattr(self, "shared_delta") else None
            if hasattr(self, "decay"):
                decay["decay"] = self.hook_log_forget(editable(self.hook_log_forget, self.decay.log_forget(x)))
        elif hasattr(self, "shared_delta") or hasattr(self, "decay"):
            what = "learned increments are" if hasattr(self, "shared_delta") else f"decay ({self.cfg.decay!r}) is"
            raise InputError(f"this model's {what} computed from the token embeddings, which a run from "
                             "start_at_layer does not have: run it from the tokens")
        else:
            x, shared = input_ids, None
        last = len(self.blocks) - 1
        for layer in range(start, stop):
            block = self.blocks[layer]
            rows = {"rows_from": rows_from} if layer == last and rows_from else {}
            x = block(x, cache, offset, shared, **rows, **decay)
        if stop_at_layer is not None:
            return x
        return self.unembed(self.final_norm(x))

    def shared_increments(self, embedded: torch.Tensor, input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The shared increments of the layers that read them (before ``hook_delta``), the token at axis 1:
        δ = softplus(DeltaMLP(e)) from the token embeddings [batch, pos, d_model], [batch, pos] for ``lpi`` (the
        same in every head) and [batch, pos, head] for ``lpi-head``; a frozen δ table's [batch, pos, head] from
        the token ids."""
        if isinstance(self.shared_delta, DeltaTable):
            if input_ids is None:
                raise InputError("this model's increments come from a frozen δ table indexed by token id, not from the "
                                 "embeddings: no component of the residual stream changes them")
            return self.shared_delta(input_ids)
        delta = F.softplus(self.shared_delta(embedded))
        return delta[..., 0] if delta.shape[-1] == 1 else delta

    def _hooked_shared(self, shared: torch.Tensor) -> torch.Tensor:
        """``shared`` through ``hook_delta`` [batch, pos], or per head through ``hook_head_delta`` [batch, head, pos]
        (the token last, as every hook of increments); the layers get them with the token at axis 1."""
        if not hasattr(self, "hook_head_delta"):
            return self.hook_delta(shared)
        per_head = shared if shared.dim() == 3 else shared[..., None]
        return self.hook_head_delta(per_head.transpose(1, 2)).transpose(1, 2)

    @property
    def increments(self) -> nn.Module:
        """Deprecated: the module whose increments the layers share is ``shared_delta``."""
        shared = self._modules.get("shared_delta")
        if shared is None:
            raise AttributeError(f"{type(self).__name__} has no shared increments (its layers read none)")
        warnings.warn("LensModel.increments is deprecated and stops working in the next release: use "
                      "LensModel.shared_delta", DeprecationWarning, stacklevel=2)
        return shared

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers)

    @property
    def layer_kinds(self) -> list[str]:
        return list(self.cfg.layer_mechanisms)


def _per_head(shared: nn.Module) -> bool:
    """Whether a shared-increments module gives one δ per head (a δ table, or a DeltaMLP with one output per head)."""
    return isinstance(shared, DeltaTable) or getattr(getattr(shared, "fc_out", None), "out_features", 1) > 1


def shared_modules(cfg: ModelConfig) -> nn.Module | None:
    """The model-level module whose increments the layers share (the kinds whose class has ``shared_module``),
    or None; layers that would need two different ones are refused."""
    attention = family_attention(cfg.family)  # the attention whose modules the layers run
    kinds = [kind for kind in dict.fromkeys(cfg.layer_mechanisms)
             if hasattr(mechanism_class(kind, attention), "shared_module")]
    if len(kinds) > 1:
        raise CheckpointError(f"layers {kinds} each need their own shared increments; a model holds one set "
                              "(use one of these kinds)")
    return getattr(mechanism_class(kinds[0], attention), "shared_module")(cfg) if kinds else None
