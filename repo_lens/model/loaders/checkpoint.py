"""Open a checkpoint directory of any supported kind and build a faithful LensModel from it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from repo_lens.atomic import remove_leftover_temp_files
from repo_lens.errors import CheckpointError
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders.authors import (
    authors_file, authors_files, is_authors_file, load_authors, load_authors_file,
)
from repo_lens.model.loaders.native.delta import base_chain, base_path, delta_files, is_delta_checkpoint, load_delta
from repo_lens.model.loaders.device import resolve_device, resolve_dtype
from repo_lens.model.loaders.files import read_json_file, regular_file
from repo_lens.model.loaders.hf.gguf import load_gguf
from repo_lens.model.loaders.hf.config import model_config_from_hf
from repo_lens.model.loaders.loaded import LoadedModel, build_strict, dtype_name
from repo_lens.model.loaders.native.format import (
    is_native_config, native_model_config, stored_weights, uses_byte_tokenizer,
)
from repo_lens.model.loaders.hf.shards import INDEX_FILE, read_safetensors, weight_files
from repo_lens.model.loaders.hf.tokenizer import load_tokenizer, tokenizer_files
from repo_lens.model.loaders.weights import hf_to_lens_name

GGUF_SUFFIX = ".gguf"


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.exists():
        raise CheckpointError(f"{directory} does not exist; pass a checkpoint directory or 'zoo:NAME'")
    if not directory.is_dir():
        raise CheckpointError(
            f"{directory} is a file, not a checkpoint directory; pass the directory holding config.json "
            "and model.safetensors"
        )
    path = directory / "config.json"
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(
            f"{directory} is not a checkpoint directory: it has no config.json. Expected an HF/RePo "
            "directory (config.json + model.safetensors + tokenizer files) or a repo_lens checkpoint."
        )
    return read_json_file(path, "config.json")


def _is_gguf(path: Path) -> bool:
    return path.suffix.lower() == GGUF_SUFFIX and (path.exists() or path.is_symlink()) and not path.is_dir()


def checkpoint_files(source: str | os.PathLike, resolve_base: Callable[[str], Path] | None = None) -> list[Path]:
    """Every file :func:`load_checkpoint` opens for ``source`` (a checkpoint directory or a .gguf file),
    unresolved: config.json, the weights (``model.safetensors`` or the index and each shard) and the
    tokenizer files, each checked to be a regular file (only config.json and the index are opened).
    The loader reads its file list through the same functions, so a caller that checks
    these paths (the app, against its roots) checks exactly what a load reads. A broken config or shard
    index raises CheckpointError, as the load would.

    Example:
        >>> import tempfile
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> from repo_lens.model.loaders import save_checkpoint
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope"])
        >>> [path.name for path in checkpoint_files(save_checkpoint(LensModel(cfg), tempfile.mkdtemp()))]
        ['config.json', 'model.safetensors']
    """
    directory = Path(source).expanduser()
    if _is_gguf(directory):
        return [directory]
    if is_authors_file(directory):
        return [_regular(authors_file(directory))]
    if is_delta_checkpoint(directory):  # its own files, then its base's
        base_chain(directory, resolve_base)  # refuses a chain that never ends in a model
        return [_regular(path) for path in delta_files(directory)] + checkpoint_files(
            base_path(directory, resolve_base), resolve_base)
    config = read_config(directory)
    files = authors_files(directory, config)
    if files is not None:
        return [_regular(path) for path in files]
    files = [directory / "config.json"]
    if (directory / INDEX_FILE).exists() or (directory / INDEX_FILE).is_symlink():
        files.append(directory / INDEX_FILE)
    files += weight_files(directory)
    if not (is_native_config(config) and uses_byte_tokenizer(config, directory)):
        files += tokenizer_files(directory)
    for path in files:
        regular_file(path, path.name)
    return files


def load_checkpoint(
    source: str | Path, device: str | torch.device = "auto", dtype: str | torch.dtype | None = None,
    resolve_base: Callable[[str], Path] | None = None,
) -> LoadedModel:
    """Load an HF OLMo-2/Llama directory (RePo layout included), a repo_lens checkpoint, a
    Llama-family .gguf file, or what continued training changed on a base (``recipe.json`` and
    ``delta.safetensors``: :mod:`repo_lens.model.loaders.native.delta`; ``resolve_base`` turns the recipe's
    base into a path, e.g. ``zoo:NAME``), strictly.

    Example:
        >>> import tempfile
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> from repo_lens.model.loaders import save_checkpoint
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=2, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope", "rope"])
        >>> loaded = load_checkpoint(save_checkpoint(LensModel(cfg), tempfile.mkdtemp()), device="cpu")
        >>> loaded.meta["format"], loaded.meta["dtype"], type(loaded.tokenizer).__name__
        ('repo_lens', 'float32', 'ByteTokenizer')
    """
    directory = Path(source).expanduser()
    if _is_gguf(directory):
        return load_gguf(directory, device=device, dtype=dtype)
    if is_authors_file(directory):  # CoPE's checkpoints/<name>.pt, the learned-increments post's step_<N>.pt
        return load_authors_file(directory, device, dtype)
    if is_delta_checkpoint(directory):  # what `repo-lens train --base` changed on a base model
        base_chain(directory, resolve_base)  # refuses a chain that never ends in a model
        base = load_checkpoint(base_path(directory, resolve_base), "cpu", torch.float32, resolve_base)
        return load_delta(directory, base, device, dtype)
    config = read_config(directory)
    remove_leftover_temp_files(directory)  # what a save killed mid-write left there
    authors = load_authors(directory, config, device, dtype)  # GRAPE's own save_pretrained layout
    if authors is not None:
        return authors
    native = is_native_config(config)
    model_config = native_model_config(config, directory) if native else model_config_from_hf(config)
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    tensors = read_safetensors(directory)
    if native:  # quantized weights dequantized, bad storage refused
        tensors = stored_weights(config, tensors, directory)
    model = build_strict(model_config, tensors, rename=_same_name if native else hf_to_lens_name,
                         dtype=target_dtype, device=target_device)
    if native and uses_byte_tokenizer(config, directory):
        tokenizer: Any = ByteTokenizer()
    else:
        tokenizer = load_tokenizer(directory)
    meta = {
        "source": str(directory.resolve()),
        "format": "repo_lens" if native else f"hf-{model_config.family}",
        "name": (config.get("info", {}).get("name") if native else config.get("_name_or_path")) or directory.name,
        "dtype": dtype_name(target_dtype),
        "device": str(target_device),
        "pe_config": config.get("pe_config"),
        "pe_config_notes": list(model_config.extra.get("pe_config_notes", [])),
        "info": config.get("info", {}) if native else {},
    }
    return LoadedModel(model=model, tokenizer=tokenizer, meta=meta)


def _regular(path: Path) -> Path:
    regular_file(path, path.name)
    return path


def _same_name(name: str) -> str:
    return name
