"""Where the app may read models from, its default model and its size limits (no Streamlit here).

Local checkpoint directories are read only under the roots in ``REPO_LENS_APP_ROOTS``
(os.pathsep-separated; none by default, so only zoo models load). The default model is
``REPO_LENS_APP_DEFAULT_MODEL`` ("zoo:NAME" or a directory under a root), else ``zoo:bytes-repo``,
else the first zoo model, else none (the app asks to pick a checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path

from repo_lens import InputError, zoo

ROOTS_ENV = "REPO_LENS_APP_ROOTS"
DEFAULT_MODEL_ENV = "REPO_LENS_APP_DEFAULT_MODEL"
PREFERRED_ZOO_MODEL = "bytes-repo"
MAX_TEXT_BYTES = 200_000  # free text and uploaded text files
MAX_TRACE_BYTES = 64 * 1024 * 1024  # uploaded trace files
SPACED_TOKEN_LIMIT = 2000  # tokens drawn by the spaced-token view (sampled beyond)
SCATTER_POINT_LIMIT = 4000  # points per head in the scatter (min-max decimated beyond)
DEFAULT_WINDOW = 300  # tokens shown by the spaced-token view at first


def configured_roots() -> list[Path]:
    """The directories local checkpoints may come from (resolved; missing ones are skipped)."""
    raw = os.environ.get(ROOTS_ENV, "")
    roots = []
    for part in raw.split(os.pathsep):
        part = part.strip()
        if part:
            path = Path(part).expanduser().resolve()
            if path.is_dir() and path not in roots:
                roots.append(path)
    return roots


def resolve_checkpoint(path: str, roots: list[Path] | None = None) -> Path:
    """The checkpoint directory ``path`` after checking that it lies under a configured root."""
    roots = configured_roots() if roots is None else roots
    text = (path or "").strip()
    if not text:
        raise InputError("no checkpoint path given; type the path of a checkpoint directory")
    if not roots:
        raise InputError(
            f"local checkpoints are switched off: set {ROOTS_ENV} to the directories the app may read "
            f"(separated by '{os.pathsep}'), e.g. {ROOTS_ENV}=/data/checkpoints make app"
        )
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        raise InputError(f"{text!r} is a relative path; give an absolute path under {_roots_text(roots)}")
    real = candidate.resolve()
    if not any(real == root or real.is_relative_to(root) for root in roots):
        raise InputError(f"{text} is outside the directories this app may read ({_roots_text(roots)}); "
                         f"add its parent to {ROOTS_ENV} to allow it")
    if not real.is_dir():
        raise InputError(f"there is no directory at {text}; pick a checkpoint directory under {_roots_text(roots)}")
    if not (real / "config.json").is_file():
        raise InputError(f"{text} is not a checkpoint directory (it has no config.json)")
    return real


def _roots_text(roots: list[Path]) -> str:
    return ", ".join(str(root) for root in roots)


def discover_checkpoints(roots: list[Path] | None = None, depth: int = 2, limit: int = 50) -> list[str]:
    """Checkpoint directories (with a config.json) at most ``depth`` levels under the roots."""
    roots = configured_roots() if roots is None else roots
    found: list[str] = []
    for root in roots:
        frontier = [root]
        for _ in range(depth + 1):
            next_frontier = []
            for directory in frontier:
                if (directory / "config.json").is_file():
                    found.append(str(directory))
                    continue
                try:
                    children = sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
                except OSError:
                    continue
                next_frontier.extend(children[:200])
            frontier = next_frontier
            if len(found) >= limit:
                break
    return sorted(dict.fromkeys(found))[:limit]


def zoo_sources() -> list[str]:
    return [zoo.zoo_source(name) for name in zoo.available_models()]


def default_source() -> str | None:
    """The model to show first; raises InputError when the configured default cannot be used."""
    configured = os.environ.get(DEFAULT_MODEL_ENV, "").strip()
    if configured:
        return loadable(configured)
    names = zoo.available_models()
    if PREFERRED_ZOO_MODEL in names:
        return zoo.zoo_source(PREFERRED_ZOO_MODEL)
    return zoo.zoo_source(names[0]) if names else None


def loadable(source: str) -> str:
    """What to pass to repo_lens.load: "zoo:NAME" as is, a local path re-checked against the roots."""
    name = zoo.parse_zoo_name(source)
    if name is not None:
        zoo.resolve_zoo_name(name)
        return source
    return str(resolve_checkpoint(source))


def source_stamp(source: str) -> float:
    """Latest modification time of the checkpoint's files, so a retrained checkpoint is reloaded."""
    name = zoo.parse_zoo_name(source)
    path = zoo.resolve_zoo_name(name) if name is not None else resolve_checkpoint(source)
    if path.is_file():  # a single-file model (e.g. an external zoo model)
        return path.stat().st_mtime
    return max((p.stat().st_mtime for p in path.iterdir() if p.is_file()), default=0.0)


def source_label(source: str) -> str:
    return source if zoo.parse_zoo_name(source) is not None else Path(source).name
