"""Deprecated: which module runs a layer kind in the authors' attention is the registry's ``attention_modules``
trait; ask :func:`repo_lens.model.registry.build_position_mechanism` with ``attention="authors"``."""

from __future__ import annotations

import warnings

from torch import nn

from repo_lens.model.config import ModelConfig
from repo_lens.model.registry import build_position_mechanism


def build_authors_mechanism(kind: str, cfg: ModelConfig) -> nn.Module:
    """Deprecated alias of ``build_position_mechanism(kind, cfg, attention="authors")``: the position mechanism
    of a layer of ``kind`` in the GRAPE and FoX authors' attention.

    >>> import warnings
    >>> cfg = ModelConfig(family="authors", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
    ...                   layer_mechanisms=["alibi"])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     type(build_authors_mechanism("alibi", cfg)).__name__
    'AlibiPositions'
    """
    warnings.warn("build_authors_mechanism(kind, cfg) is deprecated; use repo_lens.model.registry."
                  "build_position_mechanism(kind, cfg, attention='authors')", DeprecationWarning, stacklevel=2)
    return build_position_mechanism(kind, cfg, attention="authors")
