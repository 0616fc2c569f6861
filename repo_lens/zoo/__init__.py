"""The models repo_lens ships, each a repo_lens checkpoint with its card in config.json["info"], and the
one place that reads a ``zoo:NAME`` source.

Example:
    >>> parse_zoo_name("zoo:bytes-repo"), parse_zoo_name("/checkpoints/run1")
    ('bytes-repo', None)
    >>> resolve_source("zoo:bytes-repo") == ZOO_DIR / "bytes-repo"
    True
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError, InputError

ZOO_DIR = Path(__file__).parent / "models"
ZOO_PREFIX = "zoo:"


def zoo_dir() -> Path:
    """The folder of the shipped models: ``ZOO_DIR``, read at each call, so that everything that reads or
    ships zoo models follows it when it is pointed elsewhere (tests do:
    ``monkeypatch.setattr(repo_lens.zoo, "ZOO_DIR", tmp_path)``).

    >>> zoo_dir() == ZOO_DIR
    True
    """
    return ZOO_DIR


def available_models() -> list[str]:
    """The names of the zoo's models: its folders holding a ``config.json`` or a ``recipe.json`` (hidden
    folders, such as a ship in progress, are not models)."""
    if not ZOO_DIR.is_dir():
        return []
    return sorted(path.name for path in ZOO_DIR.iterdir() if not path.name.startswith(".")
                  and ((path / "config.json").exists() or (path / "recipe.json").exists()))


def parse_zoo_name(source: str | os.PathLike) -> str | None:
    """NAME when ``source`` is ``"zoo:NAME"``, else None (a path). The name is not checked here.

    >>> parse_zoo_name("zoo:smollm2-135m"), parse_zoo_name("zoo.gguf")
    ('smollm2-135m', None)
    """
    text = os.fspath(source)
    return text[len(ZOO_PREFIX):] if isinstance(text, str) and text.startswith(ZOO_PREFIX) else None


def zoo_source(name: str) -> str:
    """The source string of zoo model ``name``, the inverse of :func:`parse_zoo_name`.

    >>> zoo_source("bytes-rope")
    'zoo:bytes-rope'
    """
    return ZOO_PREFIX + name


def resolve_source(source: str | os.PathLike) -> Path:
    """The file or directory to load for ``source``: a zoo model's for ``"zoo:NAME"`` (unknown or
    uninstalled names raise InputError saying what is available), else the path itself (``~`` expanded).

    >>> resolve_source("~/ckpt") == Path.home() / "ckpt"
    True
    """
    name = parse_zoo_name(source)
    return resolve_zoo_name(name) if name is not None else Path(source).expanduser()


def resolve_zoo_name(name: str) -> Path:
    """Directory of the shipped model ``name`` (for an external model such as ``smollm2-135m``: its
    model file inside the installed package); unknown names list what is available."""
    from repo_lens.zoo.external import EXTERNAL_MODELS, external_path

    if name in EXTERNAL_MODELS:
        return external_path(name)
    names = available_models()
    if name not in names:
        known = ", ".join(names + sorted(EXTERNAL_MODELS))
        raise InputError(f"unknown zoo model {name!r}; available: {known}")
    return ZOO_DIR / name


def zoo_entries() -> list[dict[str, Any]]:
    """[{name, mechanism, task, metrics}] for every shipped model (DESIGN's `repo-lens zoo --json`). A model whose
    card cannot be read is listed with ``task`` "broken" and ``error`` saying which file and why, so that one
    damaged folder never hides the others."""
    entries = []
    for name in available_models():
        try:
            entries.append(_entry(name))
        except CheckpointError as error:
            entries.append({"name": name, "mechanism": None, "task": "broken", "metrics": {}, "error": str(error)})
    from repo_lens.zoo.external import external_entries

    return entries + external_entries()


def _entry(name: str) -> dict[str, Any]:
    folder = ZOO_DIR / name
    recipe = folder / "recipe.json"
    if recipe.exists() and not (folder / "config.json").exists():  # a re-positioned pretrained model
        card = _json_object(recipe)
        metrics = card.get("metrics", {})
        if not isinstance(metrics, dict):
            raise CheckpointError(f"{recipe}: metrics is a {type(metrics).__name__}, expected an object; restore "
                                  "the file, or ship the model again")
        return {"name": name, "mechanism": card.get("mechanism"), "task": "pretrained", "metrics": metrics}
    info = _json_object(folder / "config.json").get("info", {})
    train_config = info.get("train_config", {}) if isinstance(info, dict) else None
    metrics = info.get("metrics", {}) if isinstance(info, dict) else None
    if not isinstance(train_config, dict) or not isinstance(metrics, dict):
        raise CheckpointError(f"{folder / 'config.json'}: info.train_config and info.metrics must be objects; "
                              "restore the file, or ship the model again")
    return {"name": name, "mechanism": train_config.get("mechanism"), "task": train_config.get("task"),
            "metrics": metrics}


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path} cannot be read ({type(error).__name__}: {str(error)[:120]}); restore "
                              "the file, or ship the model again") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a {type(data).__name__}, not an object; restore the file, or ship "
                              "the model again")
    return data


def readable_file(path: str | os.PathLike) -> Path:
    """The file to open for a zoo model's weights file: itself, or the unpacked copy of a packed one (the zoo
    ships its weights xz-packed; :mod:`repo_lens.model.loaders.native.packed`)."""
    from repo_lens.model.loaders.native.packed import readable_file as unpacked

    return unpacked(Path(path))


def is_quantization_scale(tensor_name: str) -> bool:
    """Whether a weights file's tensor is the per-row scale of a weight stored quantized (a zoo model may ship
    its weights so; :mod:`repo_lens.model.loaders.native.quantized`), not a parameter of the model.

    >>> is_quantization_scale("blocks.0.mlp.W_in.row_scale"), is_quantization_scale("blocks.0.mlp.W_in")
    (True, False)
    """
    from repo_lens.model.loaders.native.quantized import SCALE_SUFFIX

    return tensor_name.endswith(SCALE_SUFFIX)


def unpacked_size(path: str | os.PathLike) -> int:
    """Bytes of the weights a (possibly packed) weights file holds."""
    return readable_file(path).stat().st_size


def delta_parts(path: str | os.PathLike) -> tuple[dict[str, Any], Path] | None:
    """(recipe, delta file) of a checkpoint that holds only what continued training changed on a base
    (``repo-lens train --base``; :mod:`repo_lens.model.loaders.native.delta`), else None.

    >>> delta_parts(ZOO_DIR / "bytes-repo") is None
    True
    """
    from repo_lens.model.loaders.native.delta import DELTA_FILE, is_delta_checkpoint, read_recipe
    from repo_lens.model.loaders.native.packed import shipped_file

    directory = Path(path)
    return (read_recipe(directory), shipped_file(directory / DELTA_FILE)) if is_delta_checkpoint(directory) else None


def base_installed(name: str) -> bool:
    """Whether zoo model ``name`` loads here without installing anything more: always for a model shipped whole;
    for one shipped as what training changed on an external base (``zoo:smollm2-135m-*``), when that base's
    package and the ``gguf`` reader are installed; never for one whose recipe cannot be read.

    >>> base_installed("bytes-rope")
    True
    """
    import importlib.util

    from repo_lens.model.loaders.native.delta import is_delta_checkpoint, read_recipe
    from repo_lens.zoo.external import EXTERNAL_MODELS, external_installed

    base: str | None = name
    if name not in EXTERNAL_MODELS:
        directory = ZOO_DIR / name
        try:
            base = parse_zoo_name(read_recipe(directory)["base"]) if is_delta_checkpoint(directory) else None
        except CheckpointError:  # a damaged recipe: the model does not load, here or anywhere
            return False
    if base not in EXTERNAL_MODELS:
        return True
    return external_installed(base) and importlib.util.find_spec("gguf") is not None
