"""Small building blocks shared by both block families: RMSNorm, the SwiGLU MLP and the plain GELU MLP.

>>> norm = RMSNorm(2, eps=0.0, weight_before_cast=True)  # x / √mean(x²): √((9 + 16) / 2) = 3.5355
>>> norm(torch.tensor([[3.0, 4.0]])).detach()
tensor([[0.8485, 1.1314]])
>>> mlp = build_mlp(1, 1, False, "swiglu")
>>> for linear in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
...     _ = nn.init.ones_(linear.weight)
>>> mlp(torch.tensor([[2.0]])).detach()  # silu(2) * 2 = 2 · sigmoid(2) · 2
tensor([[3.5232]])
>>> type(build_mlp(4, 8, False, "gelu")).__name__
'GeluMLP'
>>> build_mlp(4, 8, False, "relu")
Traceback (most recent call last):
    ...
repo_lens.errors.CheckpointError: unknown MLP 'relu' (ModelConfig.extra['mlp']); expected one of ['swiglu', 'gelu']
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.compat.blocks import MLPWeights
from repo_lens.model.hooking import through, wants


class RMSNorm(nn.Module):
    """RMS normalisation in fp32.

    OLMo-2 multiplies by the weight before casting back to the input dtype, Llama after;
    ``weight_before_cast`` picks which (identical in fp32, they differ in bf16). The scale
    √(mean(x²) + eps) passes through ``hook_scale`` only when something asks for it.
    """

    def __init__(self, dim: int, eps: float, weight_before_cast: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.weight_before_cast = weight_before_cast
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        inverse = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        if wants(self.hook_scale):
            edited = through(self.hook_scale, inverse.reciprocal())
            if edited is not None:
                inverse = edited.reciprocal()
        normed = self.hook_normalized(x32 * inverse)
        if self.weight_before_cast:
            return (self.weight * normed).to(dtype)
        return self.weight * normed.to(dtype)


class SwiGLU(MLPWeights, nn.Module):
    """down(silu(gate(x)) * up(x)), through TransformerLens' gated-MLP hooks."""

    def __init__(self, d_model: int, d_mlp: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_mlp, bias=bias)
        self.up_proj = nn.Linear(d_model, d_mlp, bias=bias)
        self.down_proj = nn.Linear(d_mlp, d_model, bias=bias)
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_pre = HookPoint()
        self.hook_pre_linear = HookPoint()
        self.hook_post = HookPoint()

    def activation(self, gate: torch.Tensor) -> torch.Tensor:
        return F.silu(gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        post = self.activation(self.hook_pre(self.gate_proj(x))) * self.hook_pre_linear(self.up_proj(x))
        return self.down_proj(self.hook_post(post))


class GeluMLP(MLPWeights, nn.Module):
    """down(gelu(up(x))) (exact, erf-based GELU): the learned-increments post's ``activation="gelu"`` MLP, chosen
    by ``ModelConfig.extra["mlp"] = "gelu"``; TransformerLens' non-gated MLP hooks."""

    def __init__(self, d_model: int, d_mlp: int, bias: bool = False) -> None:
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_mlp, bias=bias)
        self.down_proj = nn.Linear(d_mlp, d_model, bias=bias)
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.hook_post(F.gelu(self.hook_pre(self.up_proj(x)))))


MLPS = ("swiglu", "gelu")


def build_mlp(d_model: int, d_mlp: int, bias: bool, kind: str) -> nn.Module:
    """The MLP ``kind`` names (``ModelConfig.extra["mlp"]``: "swiglu", the default, or "gelu")."""
    if kind not in MLPS:
        from repo_lens.errors import CheckpointError

        raise CheckpointError(f"unknown MLP {kind!r} (ModelConfig.extra['mlp']); expected one of {list(MLPS)}")
    return GeluMLP(d_model, d_mlp, bias) if kind == "gelu" else SwiGLU(d_model, d_mlp, bias)
