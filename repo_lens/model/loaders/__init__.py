"""Checkpoint loaders: the published RePo-OLMo2 layout, stock HF OLMo-2/Llama, repo_lens' own format,
Llama-family GGUF files. Each returns a :class:`LoadedModel` (model, tokenizer, meta); ``repo_lens.load``
wraps it in a ``Lens``."""

from repo_lens.model.loaders.checkpoint import checkpoint_files, load_checkpoint
from repo_lens.model.loaders.loaded import LoadedModel
from repo_lens.model.loaders.native.format import quantize_checkpoint, save_checkpoint

__all__ = ["LoadedModel", "checkpoint_files", "load_checkpoint", "quantize_checkpoint", "save_checkpoint"]
