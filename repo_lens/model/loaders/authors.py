"""Dispatch to the adapters for checkpoints written by the mechanisms' authors' own code: GRAPE's
``save_pretrained`` directories (``model_type: "gpt2"`` with their ``GPTConfig``), the FoX package's
(``model_type: "forgetting_transformer-project_fox"``), CoPE's training checkpoint files
(``checkpoints/<name>.pt``) and the learned-increments post's (``step_<N>.pt``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.cope.load import FORMAT as COPE_FORMAT
from repo_lens.model.loaders.cope.load import is_cope_file, load_cope
from repo_lens.model.loaders.device import resolve_device, resolve_dtype
from repo_lens.model.loaders.fox.load import fox_files, is_fox_config, load_fox
from repo_lens.model.loaders.grape.load import grape_files, load_grape
from repo_lens.model.loaders.grape.config import is_grape_config
from repo_lens.model.loaders.increments_post import FORMAT as POST_FORMAT
from repo_lens.model.loaders.increments_post import is_post_checkpoint, is_post_folder, load_post, post_file
from repo_lens.model.loaders.increments_post.files import step_files
from repo_lens.model.loaders.increments_post.graft import graft_only_error, is_graft_checkpoint
from repo_lens.model.loaders.loaded import LoadedModel
from repo_lens.model.loaders.unpickler import read_pickled


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
    """True for a single-file authors' checkpoint (CoPE's ``*.pt``, the learned-increments post's
    ``step_<N>.pt``) or a folder of the post's ``step_<N>.pt`` files without a config.json."""
    return is_cope_file(path) or is_post_folder(path)


def authors_file(path: Path) -> Path:
    """The file a load of the single-file source ``path`` reads (a post's folder: its latest ``step_<N>.pt``)."""
    return post_file(path) if is_post_folder(path) else path


def load_authors_file(path: Path, device: Any, dtype: Any) -> LoadedModel:
    """The single-file authors' checkpoint ``path`` loaded (see :func:`is_authors_file`): read once with
    ``torch.load(weights_only=True)``, then run as the format its content shows, CoPE's or the post's; a
    file in neither is refused naming both."""
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    file = authors_file(path)
    picked = None
    if file != path:
        count = len(step_files(path))
        picked = f"{path} holds {count} checkpoint(s); loaded the latest, {file.name}" if count > 1 else None
    loaded = read_pickled(file, "training checkpoint")
    if is_graft_checkpoint(loaded):  # the post's delta_mlp.pt: a DeltaMLP for a base model, not a model
        raise graft_only_error(file, loaded)
    if is_post_checkpoint(loaded):
        return load_post(file, loaded, target_device, target_dtype, picked)
    if isinstance(loaded, dict) and "cfg" in loaded:
        return load_cope(file, target_device, target_dtype, loaded)
    found = f"a dict with keys {sorted(map(str, loaded))[:8]}" if isinstance(loaded, dict) else type(loaded).__name__
    raise CheckpointError(f"{file} is in no checkpoint format repo_lens reads from a .pt file: it looked for "
                          f"{COPE_FORMAT} and for {POST_FORMAT}; found {found}")
