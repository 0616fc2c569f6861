"""The hookable model: config, position mechanisms, rotary encoding, blocks."""

from repo_lens.model.cache import KVCache
from repo_lens.model.config import ModelConfig, repo_start_layer
from repo_lens.model.positions import POSITION_MECHANISMS
from repo_lens.model.transformer import LensModel

__all__ = ["KVCache", "LensModel", "ModelConfig", "POSITION_MECHANISMS", "repo_start_layer"]
