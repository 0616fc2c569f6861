"""The GRAPE and FoX authors' block: pre-norm, h = h + attn(norm(h)); h = h + mlp(norm(h)), RMSNorms
with the weight applied in fp32 (their ``rms_norm``), a SwiGLU MLP, their attention."""

from __future__ import annotations

import torch

from repo_lens.model.authors.attention import AuthorsAttention
from repo_lens.model.blocks import _Block
from repo_lens.model.config import ModelConfig
from repo_lens.model.layers import SwiGLU


class SigmoidGLU(SwiGLU):
    """down(sigmoid(gate(x)) * up(x)): FoX's MLP with ``hidden_act="sigmoid"`` (their ``glu_linear``)."""

    def activation(self, gate: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(gate)


class AuthorsBlock(_Block):
    """A Llama-style pre-norm block running :class:`AuthorsAttention` (GRAPE's ``ln_1``/``ln_2``,
    FoX's ``attn_norm``/``mlp_norm`` load into ``input_layernorm``/``post_attention_layernorm``)."""

    NORMS = {"input_layernorm": "before_attention", "post_attention_layernorm": "before_mlp"}
    WEIGHT_BEFORE_CAST = True
    ATTENTION = AuthorsAttention

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__(cfg, layer)
        if cfg.extra.get("authors", {}).get("mlp_act", "swish") == "sigmoid":
            self.mlp = SigmoidGLU(cfg.d_model, cfg.d_mlp, cfg.mlp_bias)
