"""repo_lens' own checkpoint format: config.json (format marker + ModelConfig) + model.safetensors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from repo_lens.atomic import atomic_write, atomic_write_bytes, ensure_dir
from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig
from repo_lens.model.loaders.schema import check_native_model
from repo_lens.model.transformer import LensModel

FORMAT_KEY = "repo_lens_format"
FORMAT_VERSION = 1


def is_native_config(config: dict[str, Any]) -> bool:
    return FORMAT_KEY in config


TOKENIZER_CHOICES = ("bytes", "hf")


def native_model_config(config: dict[str, Any], directory: Path) -> ModelConfig:
    """The ModelConfig of a repo_lens checkpoint's config.json, every field type-checked first."""
    version = config[FORMAT_KEY]
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
        raise CheckpointError(
            f"{directory} is repo_lens checkpoint format {version!r}; this repo_lens reads formats 1.."
            f"{FORMAT_VERSION} (an integer). Upgrade repo_lens if the checkpoint is newer."
        )
    if "model" not in config:
        raise CheckpointError(f"{directory}/config.json has no 'model' section describing the architecture")
    uses_byte_tokenizer(config, directory)
    if not isinstance(config.get("info", {}), dict):
        raise CheckpointError(f"{directory}/config.json field info={config['info']!r} is invalid; expected a JSON "
                              "object (the model card)")
    check_native_model(config["model"], f"{directory}/config.json model")
    return ModelConfig.from_dict(config["model"])


def uses_byte_tokenizer(config: dict[str, Any], directory: Path) -> bool:
    """Whether a repo_lens checkpoint's config asks for the byte tokenizer (else HF tokenizer files)."""
    tokenizer = config.get("tokenizer", "bytes")
    if tokenizer not in TOKENIZER_CHOICES:
        raise CheckpointError(f"{directory}/config.json field tokenizer={tokenizer!r} is invalid; expected one of "
                              f"{', '.join(TOKENIZER_CHOICES)}")
    return tokenizer == "bytes"


def save_checkpoint(
    model: LensModel, directory: str | os.PathLike, tokenizer: str = "bytes", info: dict[str, Any] | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Save ``model`` as a repo_lens checkpoint (safetensors + JSON; never pickle).

    ``tokenizer`` is "bytes" (byte-level model) or "hf" (HF tokenizer files already in the directory);
    ``dtype`` stores the weights in another dtype (e.g. bfloat16 halves the file).

    Example:
        >>> import tempfile
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["repo"])
        >>> path = save_checkpoint(LensModel(cfg), tempfile.mkdtemp())
        >>> sorted(p.name for p in path.iterdir())
        ['config.json', 'model.safetensors']
    """
    directory = ensure_dir(directory)
    state = {name: tensor.detach().cpu().to(dtype or tensor.dtype).contiguous()
             for name, tensor in model.state_dict().items()}
    if model.cfg.tie_word_embeddings:
        state.pop("unembed.weight", None)
    atomic_write(directory / "model.safetensors", lambda temp: save_file(state, str(temp), metadata={"format": "pt"}))
    config = {FORMAT_KEY: FORMAT_VERSION, "tokenizer": tokenizer, "model": model.cfg.to_dict(), "info": info or {}}
    atomic_write_bytes(directory / "config.json", json.dumps(config, indent=2).encode())
    return directory
