"""The hookable model: config, position mechanisms, rotary encoding, blocks.

Names are imported on first use, so that asking the mechanism registry (``repo_lens.model.registry``)
or reading a config does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repo_lens.model.cache import KVCache
    from repo_lens.model.config import ModelConfig, repo_start_layer
    from repo_lens.model.registry import POSITION_MECHANISMS
    from repo_lens.model.transformer import LensModel

__all__ = ["KVCache", "LensModel", "ModelConfig", "POSITION_MECHANISMS", "repo_start_layer"]


def __getattr__(name: str) -> Any:
    if name in ("ModelConfig", "repo_start_layer"):
        from repo_lens.model.config import ModelConfig, repo_start_layer

        return {"ModelConfig": ModelConfig, "repo_start_layer": repo_start_layer}[name]
    if name == "KVCache":
        from repo_lens.model.cache import KVCache

        return KVCache
    if name == "LensModel":
        from repo_lens.model.transformer import LensModel

        return LensModel
    if name == "POSITION_MECHANISMS":
        from repo_lens.model.registry import POSITION_MECHANISMS

        return POSITION_MECHANISMS
    raise AttributeError(f"module 'repo_lens.model' has no attribute {name!r}")
