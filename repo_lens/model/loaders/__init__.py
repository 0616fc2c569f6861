"""Checkpoint loaders: the published RePo-OLMo2 layout, stock HF OLMo-2/Llama, repo_lens' own format."""

from repo_lens.model.loaders.checkpoint import LoadedCheckpoint, load_checkpoint
from repo_lens.model.loaders.native import save_checkpoint

__all__ = ["LoadedCheckpoint", "load_checkpoint", "save_checkpoint"]
