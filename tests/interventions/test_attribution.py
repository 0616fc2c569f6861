"""Issue 33, item 5: on a model made linear in z, attribution equals exact patching, and both equal the
effect computed by hand from the weights."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from torch import nn

from repo_lens import interventions
from repo_lens.lens import Lens
from repo_lens.model import LensModel, ModelConfig
from repo_lens.model.byte_tokenizer import ByteTokenizer

CORRECT, WRONG = 3, 7
CLEAN, CORRUPTED = [1, 4, 2, 9, 5, 6, 8], [1, 4, 3, 9, 2, 6, 8]


class _Zero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def _linear_attention(self, h, cache=None, offset=0, shared=None):
    """The attention sublayer replaced by z W: its output is linear in the layer's positions z."""
    z = self.hook_pos(self.mechanism(h, offset))  # [batch, head, pos], z = h D^T
    return z.transpose(1, 2) @ self.readout


def linear_lens() -> Lens:
    """Two layers of linear per-head positions (z = h D^T); attention replaced by z W, MLPs by zero,
    norms by the identity: the logits, and a sum of logit differences, are linear in every z."""
    cfg = ModelConfig(family="olmo2", vocab_size=11, d_model=6, n_layers=2, n_heads=2, d_mlp=4,
                      layer_mechanisms=["repo-multihead-continuous"] * 2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = LensModel(cfg).eval()
    for block in model.blocks:
        block.attn.register_buffer("readout", torch.randn(cfg.n_heads, cfg.d_model))
        block.attn.forward = types.MethodType(_linear_attention, block.attn)
        block.post_attention_layernorm, block.post_feedforward_layernorm, block.mlp = nn.Identity(), nn.Identity(), _Zero()
    model.final_norm = nn.Identity()
    return Lens(model, ByteTokenizer())


def metric(logits: torch.Tensor) -> torch.Tensor:
    return (logits[..., CORRECT] - logits[..., WRONG]).sum(-1)


def by_hand(lens: Lens) -> np.ndarray:
    """[layer, head, token] effect of writing the clean z of one head and token: Δz · ∂metric/∂z, where
    ∂metric/∂z0[h] = W0[h]·u + (W0[h] D1^T)·(W1 u) (through z1 = h1 D1^T) and ∂metric/∂z1[h] = W1[h]·u."""
    model = lens.model
    E, U = model.embed.weight.double(), model.unembed.weight.double()
    D = [block.attn.mechanism.dynamic_map.weight.double() for block in model.blocks]  # [head, d]
    W = [block.attn.readout.double() for block in model.blocks]  # [head, d]
    u = U[CORRECT] - U[WRONG]

    def positions(ids):
        h0 = E[torch.tensor(ids)]
        z0 = h0 @ D[0].T
        return z0, (h0 + z0 @ W[0]) @ D[1].T

    (clean0, clean1), (corrupted0, corrupted1) = positions(CLEAN), positions(CORRUPTED)
    slope0 = W[0] @ u + (W[0] @ D[1].T) @ (W[1] @ u)  # [head]
    slope1 = W[1] @ u
    return torch.stack([((clean0 - corrupted0) * slope0).T, ((clean1 - corrupted1) * slope1).T]).detach().numpy()


@pytest.mark.parametrize("grid", ["layer", "layer_head", "layer_head_position"])
def test_attribution_equals_exact_patching_and_the_hand_computation_on_a_linear_model(grid):
    lens = linear_lens()
    exact = interventions.patch(lens, CLEAN, CORRUPTED, metric, grid=grid,
                                options=interventions.GridOptions(progress=False))
    estimate = interventions.attribute(lens, CLEAN, CORRUPTED, metric, grid=grid)
    hand = by_hand(lens)  # [layer, head, token]
    expected = {"layer": hand.sum((1, 2)), "layer_head": hand.sum(2), "layer_head_position": hand}[grid]
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(exact.effects, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(estimate.effects, expected, rtol=1e-4, atol=1e-4)
    assert estimate.baseline == pytest.approx(exact.baseline, abs=1e-5)

