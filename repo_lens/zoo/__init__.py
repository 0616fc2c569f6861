"""The models repo_lens ships (registry). Trained models are added by the zoo work (issue 4)."""

from __future__ import annotations

from pathlib import Path

from repo_lens.errors import InputError

ZOO_DIR = Path(__file__).parent / "models"


def available_models() -> list[str]:
    if not ZOO_DIR.is_dir():
        return []
    return sorted(path.name for path in ZOO_DIR.iterdir() if (path / "config.json").exists())


def resolve_zoo_name(name: str) -> Path:
    """Directory of the shipped model ``name``; unknown names list what is available."""
    names = available_models()
    if name not in names:
        shipped = ", ".join(names) if names else "none in this version"
        raise InputError(f"unknown zoo model {name!r}; available: {shipped}")
    return ZOO_DIR / name
