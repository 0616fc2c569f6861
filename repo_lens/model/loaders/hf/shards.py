"""Which safetensors files hold a checkpoint's weights, and reading them strictly: the shard index is
type-checked and may name only files inside the checkpoint directory, every weight file must be a
regular file (checked before it is opened), and a tensor may live in exactly one file."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.files import inside, read_json_file, regular_file
from repo_lens.model.loaders.native.packed import readable_file, shipped_file

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise CheckpointError(f"{INDEX_FILE} lists {key!r} twice (in {seen[key]!r} and {value!r}); "
                                  "expected each tensor in exactly one shard")
        seen[key] = value
    return seen


def read_index(directory: Path) -> dict[str, Path]:
    """``{tensor name: shard path}`` from ``model.safetensors.index.json``, every shard inside ``directory``.

    Example:
        >>> import json, tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> _ = (directory / INDEX_FILE).write_text(json.dumps({"weight_map": ["model-1.safetensors"]}))
        >>> read_index(directory)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: ...weight_map is a list; expected a JSON object {tensor name: shard file name}
    """
    path = directory / INDEX_FILE
    index = read_json_file(path, "safetensors index", object_pairs_hook=_refuse_duplicate_keys)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        found = "missing" if weight_map is None else f"a {type(weight_map).__name__}"
        raise CheckpointError(f"{path}: weight_map is {found}; expected a JSON object {{tensor name: shard file name}}")
    if not weight_map:
        raise CheckpointError(f"{path}: weight_map is empty; expected every tensor of the checkpoint mapped to "
                              "its shard")
    return {name: inside(directory, shard, path) for name, shard in weight_map.items()}


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files a load of ``directory`` reads (the index's shards, or ``model.safetensors`` or
    its packed twin ``model.safetensors.xz``)."""
    if (directory / INDEX_FILE).exists():
        return sorted(set(read_index(directory).values()))
    single = shipped_file(directory / SINGLE_FILE)  # model.safetensors, or model.safetensors.xz
    if single.exists() or single.is_symlink():
        return [single]
    pickled = [p.name for p in directory.glob("*.bin")] + [p.name for p in directory.glob("*.pt")]
    hint = (f" It has {pickled}: pickle-based weights are never loaded; convert them to safetensors "
            "(e.g. save_pretrained(..., safe_serialization=True)).") if pickled else ""
    raise CheckpointError(f"{directory} has no {SINGLE_FILE} or {INDEX_FILE}.{hint}")


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of ``model.safetensors`` or of the shards listed in ``model.safetensors.index.json``,
    after checking (from the file headers) that every tensor is in exactly one file and where the index
    says it is."""
    expected = read_index(directory) if (directory / INDEX_FILE).exists() else None
    files = weight_files(directory) if expected is None else sorted(set(expected.values()))
    owner: dict[str, Path] = {}
    handles = []
    for path in files:
        regular_file(path, "safetensors weights")
        try:
            handle = safe_open(str(readable_file(path)), framework="pt")
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{path} is not a readable safetensors file ({error})") from None
        for name in handle.keys():
            if name in owner:
                raise CheckpointError(f"tensor {name!r} is in two weight files, {owner[name].name} and {path.name}; "
                                      "expected each tensor in exactly one file (which one would win is undefined)")
            owner[name] = path
        handles.append((path, handle))
    if expected is not None:
        _match_index(expected, owner, directory / INDEX_FILE)
    tensors: dict[str, torch.Tensor] = {}
    for path, handle in handles:
        try:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
        except (SafetensorError, OSError, RuntimeError) as error:
            raise CheckpointError(f"{path} is not a readable safetensors file ({error})") from None
    return tensors


def _match_index(expected: dict[str, Path], owner: dict[str, Path], index: Path) -> None:
    wrong = sorted(name for name, path in expected.items() if owner.get(name) != path)
    unlisted = sorted(set(owner) - set(expected))
    if wrong:
        where = {name: owner[name].name if name in owner else "no file" for name in wrong[:5]}
        raise CheckpointError(f"{index} puts {wrong[:5]} in shards that do not hold them (found in {where}); "
                              "expected every listed tensor in its listed shard")
    if unlisted:
        raise CheckpointError(f"weight files hold tensors {unlisted[:5]} that {index.name} does not list; "
                              "expected the index to list every tensor")
