"""repo_lens' own checkpoint format: config.json (format marker + ModelConfig) + model.safetensors.

Format 1 stores every weight as a float; format 2 stores the 2-D weights as int8 codes with a scale per
row, declared by config.json's ``storage`` field (:mod:`repo_lens.model.loaders.native.quantized`). A
checkpoint is written as format 2 only when it is quantized, so readers of format 1 keep reading the rest.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from repo_lens.atomic import atomic_write, atomic_write_bytes, ensure_dir
from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.config import ModelConfig
from repo_lens.model.loaders.files import read_json_file
from repo_lens.model.loaders.hf.shards import read_safetensors
from repo_lens.model.loaders.hf.tokenizer import tokenizer_files
from repo_lens.model.loaders.native.packed import shipped_file
from repo_lens.model.loaders.native.quantized import (
    SCALE_SUFFIX, STORAGE_KEY, dequantize_state, quantize_state, read_storage_field, refuse_codes, storage_field,
    storage_levels,
)
from repo_lens.model.loaders.schema import check_native_model
from repo_lens.model.transformer import LensModel

FORMAT_KEY = "repo_lens_format"
PLAIN_FORMAT = 1  # every weight a float
QUANTIZED_FORMAT = 2  # 2-D weights as int8 codes + a scale per row (config.json's storage field)
FORMAT_VERSION = QUANTIZED_FORMAT  # the newest format this repo_lens reads


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
    _check_storage(config, version, directory)
    check_native_model(config["model"], f"{directory}/config.json model")
    return ModelConfig.from_dict(config["model"])


def _check_storage(config: dict[str, Any], version: int, directory: Path) -> None:
    """A storage field comes with format 2 and format 2 with a storage field."""
    levels = read_storage_field(config, f"{directory}/config.json")
    if levels is None and version == QUANTIZED_FORMAT:
        raise CheckpointError(f"{directory}/config.json is {FORMAT_KEY} {QUANTIZED_FORMAT} (quantized weights) but has "
                              f"no {STORAGE_KEY} field saying how they are stored; restore config.json from the "
                              "checkpoint's source")
    if levels is not None and version != QUANTIZED_FORMAT:
        raise CheckpointError(f"{directory}/config.json declares quantized {STORAGE_KEY} but {FORMAT_KEY} {version}; "
                              f"a quantized checkpoint is {FORMAT_KEY} {QUANTIZED_FORMAT} (set it so, or restore "
                              "config.json from the checkpoint's source)")


def stored_weights(config: dict[str, Any], tensors: dict[str, torch.Tensor], directory: Path
                   ) -> dict[str, torch.Tensor]:
    """The weights of a repo_lens checkpoint as the model takes them: quantized ones dequantized to float32
    (``codes × scale``), the rest as stored. Every native load reads its weights through here."""
    where = str(directory)
    levels = read_storage_field(config, f"{directory}/config.json")
    if levels is None:
        refuse_codes(tensors, where)
        return tensors
    return dequantize_state(tensors, levels, where)


def uses_byte_tokenizer(config: dict[str, Any], directory: Path) -> bool:
    """Whether a repo_lens checkpoint's config asks for the byte tokenizer (else HF tokenizer files)."""
    tokenizer = config.get("tokenizer", "bytes")
    if tokenizer not in TOKENIZER_CHOICES:
        raise CheckpointError(f"{directory}/config.json field tokenizer={tokenizer!r} is invalid; expected one of "
                              f"{', '.join(TOKENIZER_CHOICES)}")
    return tokenizer == "bytes"


def save_checkpoint(
    model: LensModel, directory: str | os.PathLike, tokenizer: str = "bytes", info: dict[str, Any] | None = None,
    dtype: torch.dtype | None = None, storage: str | None = None,
) -> Path:
    """Save ``model`` as a repo_lens checkpoint (safetensors + JSON; never pickle).

    ``tokenizer`` is "bytes" (byte-level model) or "hf" (HF tokenizer files already in the directory);
    ``dtype`` stores the weights in another dtype (e.g. bfloat16 halves the file); ``storage`` ("int8",
    "int7" or "int6") stores each 2-D weight as int8 codes in ±127, ±63 or ±31 with a bfloat16 scale per
    row, the other tensors in ``dtype`` (format 2; :mod:`repo_lens.model.loaders.native.quantized`).

    Example:
        >>> import tempfile
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["repo"])
        >>> path = save_checkpoint(LensModel(cfg), tempfile.mkdtemp())
        >>> sorted(p.name for p in path.iterdir())
        ['config.json', 'model.safetensors']
        >>> small = save_checkpoint(LensModel(cfg), tempfile.mkdtemp(), dtype=torch.bfloat16, storage="int6")
        >>> json.loads((small / "config.json").read_text())["storage"]
        {'scheme': 'int8-rows', 'levels': 31}
    """
    levels = None if storage is None else storage_levels(storage)
    directory = ensure_dir(directory)
    if levels is None:
        state = {name: tensor.detach().cpu().to(dtype or tensor.dtype).contiguous()
                 for name, tensor in model.state_dict().items()}
    else:
        state = quantize_state(model.state_dict(), levels, rest_dtype=dtype)
    if model.cfg.tie_word_embeddings:
        for name in ("unembed.weight", "unembed.weight" + SCALE_SUFFIX):
            state.pop(name, None)
    config = {FORMAT_KEY: PLAIN_FORMAT, "tokenizer": tokenizer, "model": model.cfg.to_dict(), "info": info or {}}
    return _write_checkpoint(directory, state, config, levels)


def _write_checkpoint(directory: Path, state: dict[str, torch.Tensor], config: dict[str, Any],
                      levels: int | None) -> Path:
    """Write the weights, then config.json (format 2 and the storage field when ``levels`` is set)."""
    if levels is not None:
        config = {FORMAT_KEY: QUANTIZED_FORMAT, STORAGE_KEY: storage_field(levels),
                  **{key: value for key, value in config.items() if key not in (FORMAT_KEY, STORAGE_KEY)}}
    atomic_write(directory / "model.safetensors", lambda temp: save_file(state, str(temp), metadata={"format": "pt"}))
    atomic_write_bytes(directory / "config.json", json.dumps(config, indent=2).encode())
    return directory


def quantize_checkpoint(source: str | os.PathLike, target: str | os.PathLike, storage: str = "int6") -> Path:
    """Store the repo_lens checkpoint ``source`` (a folder; its weights packed or not, quantized or not) again
    into the new folder ``target`` with its 2-D weights at ``storage`` ("int8", "int7" or "int6": int8 codes
    in ±127, ±63 or ±31 and a bfloat16 scale per row); the other tensors keep their dtype, config.json its
    model and card. Returns ``target``.

    Example:
        >>> import tempfile
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope"])
        >>> source = save_checkpoint(LensModel(cfg), tempfile.mkdtemp(), dtype=torch.bfloat16)
        >>> target = quantize_checkpoint(source, Path(tempfile.mkdtemp()) / "int6", "int6")
        >>> json.loads((target / "config.json").read_text())["repo_lens_format"]
        2
    """
    levels = storage_levels(storage)
    source, target = Path(source).expanduser(), Path(target).expanduser()
    config = read_json_file(source / "config.json", "config.json")
    if not is_native_config(config):
        raise CheckpointError(f"{source} is not a repo_lens checkpoint (its config.json has no {FORMAT_KEY}); "
                              "load it with repo_lens.load and save it with save_checkpoint first")
    native_model_config(config, source)
    taken = [path.name for path in (target / "config.json", shipped_file(target / "model.safetensors"))
             if path.exists() or path.is_symlink()]
    if taken:
        raise InputError(f"target {target} already holds a checkpoint ({', '.join(taken)}); choose a new or empty "
                         "folder (the source is never overwritten)")
    state = quantize_state(stored_weights(config, read_safetensors(source), source), levels)
    ensure_dir(target)
    if not uses_byte_tokenizer(config, source):
        for path in tokenizer_files(source):
            atomic_write(target / path.relative_to(source), partial(_copy_file, path))
    return _write_checkpoint(target, state, config, levels)


def _copy_file(source: Path, temp: Path) -> None:
    shutil.copy2(source, temp)
