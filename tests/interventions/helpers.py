"""Tiny models for the intervention tests, and the edits each mechanism's positions take, written out by
hand (independently of the registry, which the tests check against this table)."""

from __future__ import annotations

import torch

from repo_lens.lens import Lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.registry import is_learned, mechanism_kinds
from repo_lens.model.tiny import tiny_model

# kind -> (hook under blocks.{l}., integer value ("index": 0..T-1), constant value, pairwise)
HAND_EDITS = {
    "repo": ("attn.hook_pos", "index", 0.0, False),
    "repo-multihead-continuous": ("attn.hook_pos", "index", 0.0, False),
    "repo-continuous": ("attn.hook_pos", "index", 0.0, False),
    "lpi": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-layer": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-head": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-table": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-graft": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-pope": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-head-pope": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-table-pope": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-resid-pope": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-resid-head-pope": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-resid": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "lpi-resid-head": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "grape-m": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "grape-m-context": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "fox": ("attn.mechanism.hook_delta", 1.0, 0.0, False),
    "cope": ("attn.mechanism.hook_gates", 1.0, 0.0, True),
    "grape-ap": ("attn.mechanism.hook_potential", -1.0, 0.0, True),
    "grape-a": ("attn.mechanism.hook_potential", -1.0, 0.0, True),
    "grape-ap-rotated": ("attn.mechanism.hook_potential", -1.0, 0.0, True),
}
LEARNED = [kind for kind in mechanism_kinds() if is_learned(kind)]


def tiny_lens(kind: str, seed: int = 0) -> Lens:
    """3 layers (RoPE, then ``kind`` twice), 4 heads, every weight perturbed so no edit is a no-op
    (CoPE's position embeddings start at zero, for one)."""
    model = tiny_model(kind, n_layers=3, d_model=32, n_heads=4, seed=seed, context=128)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return Lens(model, ByteTokenizer(), {"name": f"tiny-{kind}"})


def ids_of(text: str) -> torch.Tensor:
    return torch.tensor([list(text.encode())])


def hook_name(kind: str, layer: int) -> str:
    return f"blocks.{layer}.{HAND_EDITS[kind][0]}"
