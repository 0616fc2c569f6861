"""Dispatch to the adapters for checkpoints written by the mechanisms' authors' own code: GRAPE's
``save_pretrained`` directories (``model_type: "gpt2"`` with their ``GPTConfig``), the FoX package's
(``model_type: "forgetting_transformer-project_fox"``) and CoPE's training checkpoint files
(``checkpoints/<name>.pt``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from repo_lens.model.loaders.cope import is_cope_file, load_cope
from repo_lens.model.loaders.device import resolve_device, resolve_dtype
from repo_lens.model.loaders.fox import fox_files, is_fox_config, load_fox
from repo_lens.model.loaders.grape import grape_files, load_grape
from repo_lens.model.loaders.grape_config import is_grape_config
from repo_lens.model.loaders.loaded import LoadedModel


def authors_files(directory: Path, config: dict[str, Any]) -> list[Path] | None:
    """The files a load of an authors' checkpoint directory opens; None when it is none of theirs."""
    if is_grape_config(config):
        return grape_files(directory)
    if is_fox_config(config):
        return fox_files(directory)
    return None


def load_authors(directory: Path, config: dict[str, Any], device: Any, dtype: Any) -> LoadedModel | None:
    """The authors' checkpoint in ``directory`` loaded, or None when ``config`` is none of theirs."""
    loader = load_grape if is_grape_config(config) else load_fox if is_fox_config(config) else None
    if loader is None:
        return None
    target_device = resolve_device(device)
    target_dtype: torch.dtype = resolve_dtype(dtype, target_device)
    return loader(directory, config, target_device, target_dtype)


def is_authors_file(path: Path) -> bool:
    """True for a single-file authors' checkpoint (CoPE's ``*.pt``)."""
    return is_cope_file(path)


def load_authors_file(path: Path, device: Any, dtype: Any) -> LoadedModel:
    """The single-file authors' checkpoint ``path`` loaded (see :func:`is_authors_file`)."""
    target_device = resolve_device(device)
    return load_cope(path, target_device, resolve_dtype(dtype, target_device))
