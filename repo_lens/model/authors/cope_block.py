"""The CoPE authors' decoder layer (``DecoderLayer`` with ``pre_norm``/``post_norm``): LayerNorms, a
ReLU feed-forward with biases (``fc1``, ``fc2``), pre-norm x + f(norm(x)) or, with ``--post-norm``,
norm(x + f(x)); the residual-stream hooks of the zoo's blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.authors.cope_attention import CopeAttention
from repo_lens.model.cache import KVCache
from repo_lens.model.config import ModelConfig


class Feedforward(nn.Module):
    """fc2(relu(fc1(x)))."""

    def __init__(self, d_model: int, d_mlp: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_mlp), nn.Linear(d_mlp, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class CopeBlock(nn.Module):
    """One decoder layer of a CoPE authors' checkpoint."""

    # TransformerLens' logit lens reads this: the block's hook_resid_post is the one residual stream
    hook_out_is_single_residual_stream = True

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.post_norm = bool(cfg.extra.get("authors", {}).get("post_norm", False))
        self.attn = CopeAttention(cfg, layer)
        self.attn_norm, self.ff_norm = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.mlp = Feedforward(cfg.d_model, cfg.d_mlp)
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        resid_pre = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.attn(resid_pre if self.post_norm else self.attn_norm(resid_pre), cache, offset))
        summed = resid_pre + attn_out
        resid_mid = self.hook_resid_mid(self.attn_norm(summed) if self.post_norm else summed)
        mlp_out = self.hook_mlp_out(self.mlp(resid_mid if self.post_norm else self.ff_norm(resid_mid)))
        summed = resid_mid + mlp_out
        return self.hook_resid_post(self.ff_norm(summed) if self.post_norm else summed)
