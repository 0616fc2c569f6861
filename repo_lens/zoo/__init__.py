"""The models repo_lens ships, each a repo_lens checkpoint with its card in config.json["info"]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repo_lens.errors import InputError

ZOO_DIR = Path(__file__).parent / "models"


def available_models() -> list[str]:
    if not ZOO_DIR.is_dir():
        return []
    return sorted(path.name for path in ZOO_DIR.iterdir() if (path / "config.json").exists())


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
    """[{name, mechanism, task, metrics}] for every shipped model (DESIGN's `repo-lens zoo --json`)."""
    entries = []
    for name in available_models():
        info = json.loads((ZOO_DIR / name / "config.json").read_text()).get("info", {})
        train_config = info.get("train_config", {})
        entries.append({"name": name, "mechanism": train_config.get("mechanism"), "task": train_config.get("task"),
                        "metrics": info.get("metrics", {})})
    from repo_lens.zoo.external import external_entries

    return entries + external_entries()
