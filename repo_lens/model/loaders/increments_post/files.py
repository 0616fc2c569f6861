"""Where the post's checkpoint is (a ``step_<N>.pt`` file, or a run folder holding them) and whether a
loaded object is one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError

FORMAT = ("a learned-increments post checkpoint (step_<N>.pt: a dict with 'step', 'model_state_dict' and "
          "'model_config', as its save_model_checkpoint writes it)")
_STEP = re.compile(r"^step_(\d+)\.pt$")
KEYS = ("step", "model_state_dict", "model_config")


def step_files(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every ``step_<N>.pt`` in ``folder``, by step."""
    found = []
    for path in folder.iterdir():
        match = _STEP.match(path.name)
        if match and not path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def is_post_folder(path: Path) -> bool:
    """A folder without config.json that holds ``step_<N>.pt`` files (a run's checkpoint directory)."""
    if not path.is_dir() or (path / "config.json").exists() or (path / "config.json").is_symlink():
        return False
    try:
        return bool(step_files(path))
    except OSError:  # an unreadable folder: the directory loader's own error names it
        return False


def post_file(path: Path) -> Path:
    """The checkpoint file of ``path``: the file itself, or the latest ``step_<N>.pt`` of a folder."""
    if not path.is_dir():
        return path
    found = step_files(path)
    if not found:
        raise CheckpointError(f"{path} holds no step_<N>.pt file; expected {FORMAT}")
    return found[-1][1]


def is_post_checkpoint(loaded: Any) -> bool:
    """Whether an unpickled object is (meant to be) the post's checkpoint dict: it names its state_dict or config."""
    return isinstance(loaded, dict) and ("model_state_dict" in loaded or "model_config" in loaded)


def checked_parts(loaded: dict, path: Path) -> tuple[int | None, dict[str, Any], dict[str, Any]]:
    """(step, model_state_dict, model_config) of the post's checkpoint dict, each checked to be what it says."""
    missing = [key for key in ("model_state_dict", "model_config") if key not in loaded]
    if missing:
        raise CheckpointError(f"{path}: the checkpoint dict lacks {missing}; expected {FORMAT}")
    surplus = sorted(str(key) for key in loaded if key not in KEYS)
    if surplus:
        raise CheckpointError(f"{path}: unexpected entries {surplus} in the checkpoint dict; expected only {list(KEYS)}")
    state, config, step = loaded["model_state_dict"], loaded["model_config"], loaded.get("step")
    if not isinstance(state, dict) or not state:
        raise CheckpointError(f"{path}: model_state_dict is {type(state).__name__}, not a non-empty dict of "
                              "weight name -> tensor")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: model_config is {type(config).__name__}, not the dict of "
                              "SelectivePEModelConfig fields its training saves (model_config.model_dump())")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise CheckpointError(f"{path}: step is {step!r}; expected a non-negative integer")
    return step, state, config
