"""Learned increments grafted onto a pretrained RoPE model, as the learned-increments post's graft computes them.

"Learned position increments" (Brendan Long; github.com/brendanlong/learned-position-increments-experiment,
``experiments/delta_graft``) adds one small DeltaMLP to a pretrained Llama-family model (SmolLM2, OLMo 2). It
reads the base model's input embeddings e (the embedding matrix's rows, no scale) and gives every token one
increment, shared by every layer and head; the positions the base's RoPE rotates by are its *exclusive* running
sum, so the first token sits at 0:

    δ_t = softplus(fc2(gelu(fc1(e_t)))),   position_t = Σ_{s<t} δ_s   (fp32)

Kind ``lpi-graft``. It differs from ``lpi`` (the post's from-scratch models) in the sum (exclusive, not
inclusive) and in its start: fc2's weight is zero and its bias the post's 0.5413, so δ = softplus(0.5413) ≈
0.999984 for every token and the grafted model starts as its base at positions 0.999984·t.

Example:
    >>> from repo_lens.model import LensModel, ModelConfig
    >>> cfg = ModelConfig(family="llama", vocab_size=50, d_model=32, n_layers=2, n_heads=4, d_mlp=64,
    ...                   layer_mechanisms=["lpi-graft"] * 2)
    >>> model = LensModel(cfg)
    >>> deltas = token_deltas(model)
    >>> deltas.shape, round(float(deltas[0]), 6)
    (torch.Size([50]), 0.999984)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.errors import InputError
from repo_lens.model.config import ModelConfig
from repo_lens.model.increments import DeltaMLP, SharedIncrementPositions

POST_OUTPUT_BIAS = 0.5413  # the post's fc2 bias at the start: softplus(0.5413) ≈ 0.999984


class GraftDeltaMLP(DeltaMLP):
    """The graft's DeltaMLP: Linear → GELU → Linear, computed in fp32 (δ = softplus of its output)."""

    def start_as_post(self) -> None:
        """The post's start: fc1 at PyTorch's default initialisation (from the global seed), fc2's weight 0 and
        its bias 0.5413, so δ = softplus(0.5413) for every token."""
        self.fc_in.reset_parameters()
        nn.init.zeros_(self.fc_out.weight)
        nn.init.constant_(self.fc_out.bias, POST_OUTPUT_BIAS)


class GraftIncrementPositions(SharedIncrementPositions):
    """The post's graft: δ = softplus(DeltaMLP(e)) from the base model's input embeddings, one δ per token for
    every layer and head, positions = Σ_{s<t} δ_s (exclusive). The DeltaMLP lives on the model
    (``LensModel.shared_delta``); its δ arrives as ``shared``."""

    kind = "lpi-graft"
    exclusive = True

    @staticmethod
    def shared_module(cfg: ModelConfig) -> nn.Module:
        """The model-level DeltaMLP, started as the post starts it (see :meth:`GraftDeltaMLP.start_as_post`)."""
        mlp = GraftDeltaMLP(cfg.d_model, cfg.lpi_hidden_dim, 1, output_bias=POST_OUTPUT_BIAS)
        mlp.start_as_post()
        return mlp


def token_deltas(model: nn.Module) -> torch.Tensor:
    """δ of every vocabulary id, [vocab] fp32: softplus(DeltaMLP(e)) of each row e of the embedding matrix (what
    the post's ``token_deltas`` and ``analyze_deltas`` compute), for a model whose layers share one DeltaMLP
    with one output (``lpi``, ``lpi-graft``); see the module's example."""
    mlp = getattr(model, "shared_delta", None)
    if not isinstance(mlp, DeltaMLP) or mlp.fc_out.out_features != 1:
        raise InputError("token_deltas needs a model whose layers share one DeltaMLP with one δ per token "
                         "(kind lpi or lpi-graft)")
    embed = getattr(model, "embed")
    with torch.no_grad():
        return F.softplus(mlp(embed.weight[None]))[0, :, 0]
