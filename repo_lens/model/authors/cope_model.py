"""The CoPE authors' simple decoder (``projects/cope/src/models/simple_transformer.py``
``TransformerDecoder``) as a LensModel: token embeddings (+ learned absolute position embeddings with
``--pos-emb abs``/``abs+rel``), their layers, a final LayerNorm in pre-norm models, the output
projection (tied with ``--emb-tie``). Their forward returns log_softmax of these logits."""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from repo_lens.model.authors.cope_block import CopeBlock
from repo_lens.model.cache import KVCache
from repo_lens.model.compat.forward import layer_range
from repo_lens.model.compat.weights import Embed, Unembed
from repo_lens.model.config import ModelConfig
from repo_lens.model.transformer import LensModel


class CopeModel(LensModel):
    """A CoPE authors' checkpoint, hookable as every LensModel (``embed``, ``blocks``, ``final_norm``, ``unembed``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        HookedRootModule.__init__(self)
        self.cfg = cfg
        options = cfg.extra.get("authors", {})
        self.embed = Embed(cfg.vocab_size, cfg.d_model)
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_embed = HookPoint()
        if options.get("absolute"):
            self.abs_pos_emb = nn.Parameter(torch.zeros(1, cfg.max_position_embeddings, cfg.d_model))
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(CopeBlock(cfg, layer) for layer in range(cfg.n_layers))
        self.final_norm = nn.Identity() if options.get("post_norm") else nn.LayerNorm(cfg.d_model)
        self.unembed = Unembed(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.unembed.weight = self.embed.weight
        self.setup()

    def forward_logits(self, input_ids: torch.Tensor, cache: KVCache | None = None, rows_from: int = 0,
                       start_at_layer: int | None = None, stop_at_layer: int | None = None) -> torch.Tensor:
        offset = cache.seq_len if cache is not None else 0
        start, stop = layer_range(len(self.blocks), start_at_layer, stop_at_layer)
        if start_at_layer is None:
            x = self.hook_embed(self.embed(input_ids))
            if hasattr(self, "abs_pos_emb"):
                x = x + self.hook_pos_embed(self.abs_pos_emb[:, offset:offset + input_ids.shape[1]].expand_as(x))
        else:
            x = input_ids  # the residual stream entering block start_at_layer
        for layer in range(start, stop):
            x = self.blocks[layer](x, cache, offset, None)
        if stop_at_layer is not None:
            return x
        return self.unembed(self.final_norm(x[:, rows_from:]))
