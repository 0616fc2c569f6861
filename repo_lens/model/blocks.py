"""Transformer blocks: OLMo-2 (post-norm on each sublayer's output) and Llama (pre-norm)."""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.attention import Attention
from repo_lens.model.cache import KVCache
from repo_lens.model.compat.blocks import BlockNames
from repo_lens.model.config import ModelConfig
from repo_lens.model.layers import RMSNorm, build_mlp


class _Block(BlockNames, nn.Module):
    """Attention + SwiGLU MLP and the residual-stream hook points both families share.

    The families differ only in where their two RMSNorms sit: ``NORMS`` maps each norm's
    checkpoint name to its place, one of "before_attention", "after_attention", "before_mlp",
    "after_mlp".
    """

    # TransformerLens' logit lens reads this: the block's hook_resid_post is the one residual stream
    hook_out_is_single_residual_stream = True

    NORMS: dict[str, str] = {}
    WEIGHT_BEFORE_CAST = True
    ATTENTION: type[nn.Module] = Attention  # the attention module class (the authors' blocks use their own)
    ROWS_FROM = True  # forward takes rows_from (repo_lens.interventions checks this before passing it)

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.attn = self.ATTENTION(cfg, layer)
        self.mlp = build_mlp(cfg.d_model, cfg.d_mlp, cfg.mlp_bias, cfg.extra.get("mlp", "swiglu"))
        for name in self.NORMS:
            setattr(self, name, RMSNorm(cfg.d_model, cfg.rms_norm_eps, weight_before_cast=self.WEIGHT_BEFORE_CAST))
        self._norm_at = {place: name for name, place in self.NORMS.items()}
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def _norm(self, place: str, x: torch.Tensor) -> torch.Tensor:
        name = self._norm_at.get(place)
        return x if name is None else getattr(self, name)(x)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None, rows_from: int = 0, *,
                decay: torch.Tensor | None = None) -> torch.Tensor:
        """The block's output for ``x`` [batch, pos, d_model]; with ``rows_from``, only rows ``rows_from``..
        (every row still attended to; the MLP and the queries run for those rows only where the
        attention module can). ``decay``: the model's log α of these tokens, in a model with a decay."""
        resid_pre = self.hook_resid_pre(x)
        normed = self._norm("before_attention", resid_pre)
        # a mechanism that reads the residual stream entering the block (not the normed input) gets it too
        reads = {"residual": resid_pre} if getattr(getattr(self.attn, "mechanism", None), "reads_residual", False) else {}
        if decay is not None:
            reads["decay"] = decay
        if rows_from and getattr(self.attn, "QUERY_ROWS", False):
            attn = self.attn(normed, cache, offset, shared, query_from=rows_from, **reads)
        else:
            attn = self.attn(normed, cache, offset, shared, **reads)[:, rows_from:]
        resid_pre = resid_pre[:, rows_from:]
        attn_out = self.hook_attn_out(self._norm("after_attention", attn))
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)
        mlp_out = self.hook_mlp_out(self._norm("after_mlp", self.mlp(self._norm("before_mlp", resid_mid))))
        return self.hook_resid_post(resid_mid + mlp_out)


class Olmo2Block(_Block):
    """h = h + norm(attn(h)); h = h + norm(mlp(h)). The attention (and RePo's f) reads the raw residual."""

    NORMS = {"post_attention_layernorm": "after_attention", "post_feedforward_layernorm": "after_mlp"}
    WEIGHT_BEFORE_CAST = True


class LlamaBlock(_Block):
    """h = h + attn(norm(h)); h = h + mlp(norm(h)). The attention (and RePo's f) reads the normed h."""

    NORMS = {"input_layernorm": "before_attention", "post_attention_layernorm": "before_mlp"}
    WEIGHT_BEFORE_CAST = False


BLOCKS = {"olmo2": Olmo2Block, "llama": LlamaBlock}
