"""Small randomly initialised models, for demos and pipeline checks (their positions mean nothing)."""

from __future__ import annotations

import torch

from repo_lens.model.config import ModelConfig, repo_start_layer
from repo_lens.model.transformer import LensModel


def tiny_model(mechanism: str = "repo", n_layers: int = 4, d_model: int = 64, n_heads: int = 4,
               family: str = "olmo2", seed: int = 0, context: int = 512) -> LensModel:
    """A byte-level model: RoPE below layer ⌈L/3⌉, ``mechanism`` from there on (RePo's default).

    >>> tiny_model("repo").cfg.layer_mechanisms
    ['rope', 'rope', 'repo', 'repo']
    """
    start = repo_start_layer(n_layers)
    cfg = ModelConfig(
        family=family, vocab_size=257, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_mlp=4 * d_model,
        max_position_embeddings=context,
        layer_mechanisms=["rope" if layer < start else mechanism for layer in range(n_layers)],
    )
    torch.manual_seed(seed)
    return LensModel(cfg).eval()
