"""The one ``load()``: a zoo name, a checkpoint directory or a GGUF file becomes a :class:`Lens`.

Sources are resolved here (``zoo:NAME`` through :mod:`repo_lens.zoo`), loaded by the loaders in
:mod:`repo_lens.model.loaders` (which return a plain model + tokenizer + meta) and wrapped in a
``Lens``. ``repo_lens.load`` is this function.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from repo_lens.errors import InputError
from repo_lens.lens import Lens
from repo_lens.model.loaders import checkpoint_files as _checkpoint_files
from repo_lens.model.loaders import load_checkpoint
from repo_lens.model.loaders.device_map import load_dispatched
from repo_lens.zoo import resolve_source


def load(source: str | os.PathLike, device: Any = "auto", dtype: Any = None, device_map: Any = None,
         max_memory: dict | None = None) -> Lens:
    """Load ``source`` into a :class:`Lens`: ``"zoo:NAME"`` (a shipped or installed zoo model), a
    checkpoint directory (published RePo-OLMo2 layout, stock HF OLMo-2/Llama, or repo_lens' own
    format) or a Llama-family ``.gguf`` file.

    ``device="auto"`` picks CUDA + bf16 when present, else CPU + fp32. ``device_map`` ("auto",
    "balanced", or a dict) spreads a big model over several GPUs with accelerate, whole blocks per
    device, within ``max_memory`` (docs/big_checkpoints.md).

    Example:
        >>> lens = load("zoo:bytes-repo", device="cpu")
        >>> lens.meta["name"], lens.trace("hi").positions.shape
        ('bytes-repo', (6, 4, 2))
        >>> load("zoo:no-such-model")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.InputError: unknown zoo model 'no-such-model'; available: bytes-cope, ...
    """
    path = _source_path(source)
    if max_memory is not None and not isinstance(max_memory, dict):
        raise InputError(f"max_memory must be a dict such as {{0: '20GiB', 'cpu': '64GiB'}}, not "
                         f"{type(max_memory).__name__}")
    if device_map is not None:
        loaded = load_dispatched(path, device_map=device_map, dtype=dtype, max_memory=max_memory)
    else:
        loaded = load_checkpoint(path, device=device, dtype=dtype)
    return Lens(loaded.model, loaded.tokenizer, loaded.meta)


def checkpoint_files(source: str | os.PathLike) -> list[Path]:
    """Every file ``load(source)`` opens (config.json, weights or shard index + shards, tokenizer files;
    for a .gguf, the file), unresolved, so a caller can check each real path before loading (the app
    checks them against its roots). Broken configs or shard indices raise CheckpointError as ``load`` does.

    Example:
        >>> [path.name for path in checkpoint_files("zoo:bytes-repo")]
        ['config.json', 'model.safetensors']
    """
    return _checkpoint_files(_source_path(source))


def _source_path(source: Any) -> Path:
    if not isinstance(source, (str, os.PathLike)) or isinstance(os.fspath(source), bytes):
        raise InputError(f"source must be 'zoo:NAME' or a path (str or os.PathLike), not {type(source).__name__}")
    if not os.fspath(source) or "\x00" in os.fspath(source):
        raise InputError(f"source {os.fspath(source)!r} is empty or holds a NUL character; pass 'zoo:NAME' or a path")
    try:
        path = resolve_source(source)
        path.stat()
    except FileNotFoundError:
        return path
    except (OSError, RuntimeError) as error:  # a name too long, a symlink loop, '~user' of no user
        reason = getattr(error, "strerror", None) or str(error)
        raise InputError(f"cannot use the source {os.fspath(source)!r:.200}: {reason}; "
                         "pass 'zoo:NAME' or the path of a checkpoint directory or .gguf file") from None
    return path
