"""The CoPE authors' weight names (their model wrapped in ``DummyWrapper``: ``module.`` first) as
repo_lens module paths, and the one change of value: their attention divides CoPE's and the relative
embeddings' logits by √d_head with q·k (CoPE's not with ``--cope-nodiv``), which we fold into the
embeddings, stored [d_head, npos]."""

from __future__ import annotations

import math
import re

from typing import cast

import torch

from repo_lens.model.loaders.renames import compile_rules, rename_by_rules

_L = r"(?:module\.)?core\.layers\.(\d+)\."
_RULES = compile_rules((
    (r"(?:module\.)?embed_toks\.", "embed."),
    (r"(?:module\.)?abs_pos_emb$", "abs_pos_emb"),
    (r"(?:module\.)?out_norm\.", "final_norm."),
    (r"(?:module\.)?out_mod\.", "unembed."),
    (_L + r"attn\.proj_query\.", r"blocks.\1.attn.q_proj."),
    (_L + r"attn\.proj_key\.", r"blocks.\1.attn.k_proj."),
    (_L + r"attn\.proj_val\.", r"blocks.\1.attn.v_proj."),
    (_L + r"attn\.proj_out\.", r"blocks.\1.attn.o_proj."),
    (_L + r"attn\.proj_key_cope\.", r"blocks.\1.attn.k_cope_proj."),
    (_L + r"attn\.attn\.pos_emb$", r"blocks.\1.attn.mechanism.position_embeddings"),
    (_L + r"attn\.attn\.rel_pos_emb\.emb$", r"blocks.\1.attn.{rel}.emb"),
    (_L + r"(attn_norm|ff_norm)\.", r"blocks.\1.\2."),
    (_L + r"ff\.(fc1|fc2)\.", r"blocks.\1.mlp.\2."),
))
_LAYER = re.compile(_L)


def cope_to_lens_name(name: str, kinds: list[str]) -> str:
    """Our module path of a CoPE weight name (``kinds``: each layer's kind; unknown names unchanged).

    >>> cope_to_lens_name("module.core.layers.1.attn.attn.rel_pos_emb.emb", ["cope", "rel"])
    'blocks.1.attn.mechanism.emb'
    >>> cope_to_lens_name("module.core.layers.0.ff.fc1.bias", ["cope"])
    'blocks.0.mlp.fc1.bias'
    """
    renamed = rename_by_rules(name, _RULES)
    if "{rel}" in renamed:  # the shared relative embeddings: the layer's mechanism, or beside its CoPE
        layer = int(cast("re.Match[str]", _LAYER.match(name)).group(1))  # every {rel} rule has a layer
        renamed = renamed.replace("{rel}", "mechanism" if layer < len(kinds) and kinds[layer] == "rel"
                                  else "mechanism.relative")
    return renamed


def lens_tensor(name: str, tensor: torch.Tensor, d_head: int, nodiv: bool) -> torch.Tensor:
    """The value our parameter ``name`` takes from their ``tensor`` (embeddings [1, d, npos] -> [d, npos],
    divided by √d where their attention divides them)."""
    if name.endswith("position_embeddings"):
        return tensor[0] if nodiv else tensor[0] / math.sqrt(d_head)
    if name.endswith(".emb"):
        return tensor[0] / math.sqrt(d_head)
    return tensor
