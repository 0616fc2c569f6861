"""Weights in pickle files (``pytorch_model.bin``, or shards listed by ``pytorch_model.bin.index.json``),
read through the restricted unpickler; a file must hold a flat {name: tensor} dict."""

from __future__ import annotations

from pathlib import Path

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.files import inside, read_json_file
from repo_lens.model.loaders.unpickler import read_pickled

BIN_FILE = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"


def bin_files(directory: Path) -> list[Path]:
    """The pickle weight files of ``directory`` (the index's shards, or ``pytorch_model.bin``)."""
    index = directory / BIN_INDEX
    if index.exists() or index.is_symlink():
        weight_map = read_json_file(index, "weight index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: weight_map must be a non-empty JSON object {{tensor name: shard file}}")
        return sorted({inside(directory, shard, index) for shard in weight_map.values()})
    if (directory / BIN_FILE).exists() or (directory / BIN_FILE).is_symlink():
        return [directory / BIN_FILE]
    raise CheckpointError(f"{directory} has no {BIN_FILE} (nor {BIN_INDEX}); the authors' save_pretrained writes "
                          "the weights there")


def read_state_dict(path: Path, what: str, loaded: object | None = None) -> dict[str, torch.Tensor]:
    """The {name: tensor} dict pickled in ``path`` (or given as ``loaded``), checked to be one."""
    state = read_pickled(path, what) if loaded is None else loaded
    if not isinstance(state, dict) or not all(isinstance(key, str) and isinstance(value, torch.Tensor)
                                              for key, value in state.items()):
        raise CheckpointError(f"{path} ({what}) does not hold a state_dict (a dict of weight name -> tensor); "
                              f"found {type(state).__name__}")
    return dict(state)


def read_bin_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the pickle weight files of ``directory``; a tensor in two shards is refused."""
    tensors: dict[str, torch.Tensor] = {}
    for path in bin_files(directory):
        for name, tensor in read_state_dict(path, path.name).items():
            if name in tensors:
                raise CheckpointError(f"{name} is in two weight files of {directory}; expected each tensor once")
            tensors[name] = tensor
    return tensors
