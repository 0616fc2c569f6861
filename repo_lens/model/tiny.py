"""Small randomly initialised models, for demos and pipeline checks (their positions mean nothing)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from repo_lens.errors import InputError
from repo_lens.model.config import ModelConfig, repo_start_layer
from repo_lens.model.registry import block_families
from repo_lens.model.transformer import LensModel


@dataclass(frozen=True)
class PublishedShape:
    """The layer/head layout and context of a published model, at a d_model small enough for CPU tests."""

    n_layers: int
    n_heads: int
    first_learned_layer: int
    context: int
    d_model: int
    d_head: int
    d_mlp: int
    source: str


# SakanaAI/RePo-OLMo2-1B-stage2-L5: 16 layers × 16 heads, pe_config dynmaic_pe_start_layer 5
# (0-based: layers 0–4 RoPE, 5–15 RePo; not ⌈16/3⌉ = 6), trained at 4,096 tokens. The tiny stand-in's
# context is 8,192 so checks past the trained length need no flag (repo_lens always reads the limit
# from a checkpoint's own config). At 4,096 tokens the
# 16 × 16 causal attentions dominate the CPU time; CPU attention kernels run d_head 16 faster
# than 8, and d_model 128 with d_mlp 256 keeps the rest small (a trace in ~3.5 s on 2 cores).
PUBLISHED_SHAPES: dict[str, PublishedShape] = {
    "olmo2-1b": PublishedShape(n_layers=16, n_heads=16, first_learned_layer=5, context=8192, d_model=128,
                               d_head=16, d_mlp=256, source="SakanaAI/RePo-OLMo2-1B-stage2-L5"),
}


def published_shape(name: str) -> PublishedShape:
    """The shape called ``name`` (one of ``PUBLISHED_SHAPES``).

    >>> published_shape("olmo2-1b").n_layers
    16
    """
    if name not in PUBLISHED_SHAPES:
        raise InputError(f"unknown model shape {name!r}; known shapes: {', '.join(sorted(PUBLISHED_SHAPES))}")
    return PUBLISHED_SHAPES[name]


def tiny_model(mechanism: str = "repo", n_layers: int = 4, d_model: int = 64, n_heads: int = 4,
               family: str | None = None, seed: int = 0, context: int = 512, shape: str | None = None) -> LensModel:
    """A byte-level model: RoPE below layer ⌈L/3⌉, ``mechanism`` from there on (RePo's default).

    ``family`` is the block family (``ModelConfig.family``); by default the first that runs ``mechanism``
    (the registry's ``block_families``): "olmo2" for every kind the zoo's attention runs, "authors" for a kind
    only the GRAPE and FoX authors' attention runs. ``shape`` (e.g. "olmo2-1b") takes layers, heads, first
    learned layer and context from a published model instead (see ``PUBLISHED_SHAPES``), with a small d_model.

    >>> tiny_model("repo").cfg.layer_mechanisms
    ['rope', 'rope', 'repo', 'repo']
    >>> tiny_model("repo").cfg.family, tiny_model("grape-ap-rotated").cfg.family
    ('olmo2', 'authors')
    >>> cfg = tiny_model("repo", shape="olmo2-1b").cfg
    >>> cfg.n_layers, cfg.n_heads, cfg.layer_mechanisms.index("repo"), cfg.max_position_embeddings
    (16, 16, 5, 8192)
    """
    start, d_head, d_mlp = repo_start_layer(n_layers), None, 4 * d_model
    if shape is not None:
        layout = published_shape(shape)
        n_layers, n_heads, d_model, context = layout.n_layers, layout.n_heads, layout.d_model, layout.context
        start, d_head, d_mlp = layout.first_learned_layer, layout.d_head, layout.d_mlp
    cfg = ModelConfig(
        family=block_families(mechanism)[0] if family is None else family, vocab_size=257, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_mlp=d_mlp,
        head_dim=d_head, max_position_embeddings=context,
        layer_mechanisms=["rope" if layer < start else mechanism for layer in range(n_layers)],
    )
    torch.manual_seed(seed)
    return LensModel(cfg).eval()


def published_shape_model(name: str = "olmo2-1b", mechanism: str = "repo", seed: int = 0) -> LensModel:
    """A random byte-level model of a published model's shape (``tiny_model(..., shape=name)``).

    >>> published_shape_model().cfg.d_head
    16
    """
    return tiny_model(mechanism, seed=seed, shape=name)
