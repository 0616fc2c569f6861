"""Transformer blocks: OLMo-2 (post-norm on each sublayer's output) and Llama (pre-norm)."""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.attention import Attention
from repo_lens.model.cache import KVCache
from repo_lens.model.config import ModelConfig
from repo_lens.model.layers import RMSNorm, SwiGLU


class _Block(nn.Module):
    """Attention + SwiGLU MLP and the residual-stream hook points both families share."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.attn = Attention(cfg, layer)
        self.mlp = SwiGLU(cfg.d_model, cfg.d_mlp, cfg.mlp_bias)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]


class Olmo2Block(_Block):
    """h = h + norm(attn(h)); h = h + norm(mlp(h)). The attention (and RePo's f) reads the raw residual."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.rms_norm_eps, weight_before_cast=True)
        self.post_feedforward_layernorm = RMSNorm(cfg.d_model, cfg.rms_norm_eps, weight_before_cast=True)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        resid_pre = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.post_attention_layernorm(self.attn(resid_pre, cache, offset, shared)))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp_out = self.hook_mlp_out(self.post_feedforward_layernorm(self.mlp(resid_mid)))
        return self.hook_resid_post(resid_mid + mlp_out)


class LlamaBlock(_Block):
    """h = h + attn(norm(h)); h = h + mlp(norm(h)). The attention (and RePo's f) reads the normed h."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__(cfg, layer)
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.rms_norm_eps, weight_before_cast=False)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.rms_norm_eps, weight_before_cast=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        resid_pre = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.attn(self.input_layernorm(resid_pre), cache, offset, shared))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp_out = self.hook_mlp_out(self.mlp(self.post_attention_layernorm(resid_mid)))
        return self.hook_resid_post(resid_mid + mlp_out)


BLOCKS = {"olmo2": Olmo2Block, "llama": LlamaBlock}
