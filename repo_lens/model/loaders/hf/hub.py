"""Checkpoints by Hugging Face Hub id: ``"org/name"`` at a branch, tag or commit becomes a snapshot folder
in the standard Hub cache (``$HF_HUB_CACHE``, by default ``~/.cache/huggingface/hub``) that holds only the
files a load reads: config.json, the weights (``model.safetensors``, or the shard index and the shards it
lists) and the tokenizer files. Optimizer states, GGUF or ONNX exports and other extras in the repository
are never fetched, and pickled weights (``pytorch_model.bin``) are never loaded.

The fetch runs in two steps through ``huggingface_hub.snapshot_download``: first the small files that say
what else is needed (config.json, the shard index, tokenizer_config.json), then, pinned to the commit the
first step resolved, the weights and tokenizer files they name. ``HF_HUB_OFFLINE=1`` or
``local_files_only=True`` reads the cache only; a cache miss is an error that names the command to run.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError, InputError
from repo_lens.model.loaders.hf.shards import INDEX_FILE, SINGLE_FILE, read_index
from repo_lens.model.loaders.hf.tokenizer import CHAT_TEMPLATE_DIR, TOKENIZER_FILES, tokenizer_files

CONFIG_FILE = "config.json"
# the first fetch: the files that say which weights and tokenizer files the second fetch needs
INDEX_FILES = (CONFIG_FILE, INDEX_FILE, "tokenizer_config.json")
DEFAULT_REVISION = "main"


@dataclass(frozen=True)
class HubSnapshot:
    """A repository resolved into the local Hub cache: ``path`` is ``.../snapshots/<commit>``."""

    repo_id: str
    revision: str  # as requested: a branch, a tag or a commit hash ("main" when none was given)
    commit: str  # the commit the revision resolved to
    path: Path

    def meta(self) -> dict[str, str]:
        """What a Lens and its traces record in ``meta["hub"]``."""
        return {"repo_id": self.repo_id, "revision": self.revision, "commit": self.commit}


def is_hub_id(text: str) -> bool:
    """True for a Hub model id of the form ``"org/name"`` (a bare ``"name"`` is taken for a path).

    Example:
        >>> [is_hub_id(text) for text in ("SakanaAI/RePo-OLMo2-1B-stage2-L5", "gpt2", "./ckpt", "~/ckpt", "a/b/c")]
        [True, False, False, False, False]
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not isinstance(text, str) or text.count("/") != 1:
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def snapshot_download_patterns(directory: Path) -> list[str]:
    """The ``allow_patterns`` of the second fetch, read from the config.json, shard index and
    tokenizer_config.json already in ``directory``: the shards the index lists (else
    ``model.safetensors``), the tokenizer files, the chat templates and any ``fast_tokenizer_files``.

    Example:
        >>> import json, tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
        >>> _ = (directory / INDEX_FILE).write_text(json.dumps(index))
        >>> snapshot_download_patterns(directory)[:3]
        ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'tokenizer.json']
    """
    weights = _weight_names(directory)
    tokenizer = [*TOKENIZER_FILES, *(path.relative_to(directory).as_posix() for path in tokenizer_files(directory))]
    names = [name for name in dict.fromkeys(weights + tokenizer) if name not in INDEX_FILES]  # INDEX_FILES: fetched
    # allow_patterns are fnmatch patterns: escape the names so that each matches only itself
    return [glob.escape(name) for name in names] + [f"{CHAT_TEMPLATE_DIR}/*"]


def _weight_names(directory: Path) -> list[str]:
    """The weight files a load of ``directory`` reads, relative to it: the index's shards, else model.safetensors."""
    if not (directory / INDEX_FILE).exists():
        return [SINGLE_FILE]
    return sorted({path.relative_to(directory).as_posix() for path in read_index(directory).values()})


def download_snapshot(repo_id: str, revision: str | None = None, token: str | bool | None = None,
                      local_files_only: bool | None = None) -> HubSnapshot:
    """Fetch (or, offline, find) the files a load of Hub repository ``repo_id`` reads and return where they are.

    ``revision`` is a branch, a tag or a full commit hash (default ``"main"``); ``token`` is passed to
    ``huggingface_hub`` for gated or private repositories (default: ``HF_TOKEN`` or the saved login);
    ``local_files_only=True`` (or ``HF_HUB_OFFLINE=1``) reads the cache only.

    Example:
        >>> download_snapshot("org/name", revision="../../etc")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.InputError: revision '../../etc' is not a branch, tag or commit name; ...
    """
    from huggingface_hub import snapshot_download

    check_revision(revision)
    if token is not None and not isinstance(token, (str, bool)):
        raise InputError(f"token must be a Hugging Face access token (str), not {type(token).__name__}")
    requested = revision or DEFAULT_REVISION
    offline = bool(local_files_only) or _offline_mode()
    options: dict[str, Any] = {"token": token, "local_files_only": bool(local_files_only)}
    try:
        first = Path(snapshot_download(repo_id, revision=requested, allow_patterns=list(INDEX_FILES), **options))
        commit = first.name  # the snapshot folder is named after the commit
        patterns = snapshot_download_patterns(first) if (first / CONFIG_FILE).exists() else []
        path = first if not patterns else Path(
            snapshot_download(repo_id, revision=commit, allow_patterns=patterns, **options))
    except Exception as error:  # noqa: BLE001 - huggingface_hub's errors are translated, others re-raised
        message = _explain(error, repo_id, requested, offline)
        if message is None:
            raise
        raise InputError(message) from None
    snapshot = HubSnapshot(repo_id=repo_id, revision=requested, commit=commit, path=path)
    _check_complete(snapshot, offline)
    return snapshot


def check_revision(revision: Any) -> None:
    """Refuse a ``revision`` that cannot name a branch, tag or commit (None, the default, passes)."""
    if revision is None:
        return
    if not isinstance(revision, str):
        raise InputError(f"revision must be a branch, tag or commit hash (str), not {type(revision).__name__}")
    parts = revision.split("/")
    if not revision.strip() or revision.startswith("/") or "\\" in revision or "\x00" in revision or any(
            part in ("", ".", "..") for part in parts):
        raise InputError(f"revision {revision!r} is not a branch, tag or commit name; pass e.g. 'main', 'v1.0' or "
                         "a 40-character commit hash")


def _offline_mode() -> bool:
    from huggingface_hub import constants

    is_offline = getattr(constants, "is_offline_mode", None)
    return bool(is_offline() if callable(is_offline) else constants.HF_HUB_OFFLINE)


def hub_cli(command: str) -> str:
    """The huggingface_hub command line for ``command`` ("download ..." or "login"), as the installed
    version spells it (``hf`` from 0.34 on, ``huggingface-cli`` before)."""
    import huggingface_hub

    major, minor = (int(part) for part in huggingface_hub.__version__.split(".")[:2])
    if (major, minor) >= (0, 34):
        return f"hf auth {command}" if command == "login" else f"hf {command}"
    return f"huggingface-cli {command}"


def repo_cache_folder(repo_id: str) -> Path:
    """Where the Hub cache keeps model repository ``repo_id`` (``models--ORG--NAME``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))


def _download_command(repo_id: str, revision: str) -> str:
    suffix = "" if revision == DEFAULT_REVISION else f" --revision {revision}"
    return f"`{hub_cli('download')} {repo_id}{suffix}`"


def _explain(error: Exception, repo_id: str, revision: str, offline: bool) -> str | None:
    """A message for an error of huggingface_hub that says what to do, or None for any other error."""
    from huggingface_hub import errors

    login = f"pass hub_access=HubAccess(token='hf_...') to load(), set HF_TOKEN, or run `{hub_cli('login')}`"
    if isinstance(error, errors.GatedRepoError):
        return (f"the Hub repository {repo_id} is gated: accept its conditions at https://huggingface.co/{repo_id} "
                f"with your account, then {login}")
    if isinstance(error, errors.RepositoryNotFoundError):
        return (f"{repo_id!r} is neither a local directory nor a Hub repository this account can see; check the "
                f"name, or if the repository is private {login}")
    if isinstance(error, errors.RevisionNotFoundError):
        return (f"the Hub repository {repo_id} has no revision {revision!r}; pass a branch, a tag or a full commit "
                f"hash that exists (see https://huggingface.co/{repo_id}/commits/main)")
    if isinstance(error, errors.LocalEntryNotFoundError):
        return _cache_miss(repo_id, revision, offline, error)
    if isinstance(error, errors.HfHubHTTPError):
        return f"the Hugging Face Hub refused {repo_id} at revision {revision!r} ({error}); try again later"
    return None


def _cache_miss(repo_id: str, revision: str, offline: bool, error: Exception) -> str:
    from huggingface_hub import errors

    folder = repo_cache_folder(repo_id)
    if offline:
        fix = _offline_fix(repo_id, revision)
    else:
        cause = error.__cause__ or error.__context__ or error
        fix = (f"the Hub could not be reached ({type(cause).__name__}); check the connection, "
               f"or run {_download_command(repo_id, revision)} where there is one")
    if isinstance(error, getattr(errors, "IncompleteSnapshotError", ())):
        return f"the cached snapshot of {repo_id} at revision {revision!r} in {folder} is incomplete; {fix}"
    if not folder.is_dir():
        return f"{repo_id} is not in the Hugging Face cache at {folder.parent}; {fix}"
    cached = _cached_revisions(folder)
    return (f"revision {revision!r} of {repo_id} is not in the Hugging Face cache at {folder} (cached: "
            f"{', '.join(cached) if cached else 'none'}); {fix}")


def _offline_fix(repo_id: str, revision: str) -> str:
    switch = "unset HF_HUB_OFFLINE" if _offline_mode() else "load without HubAccess(local_files_only=True)"
    return f"run {_download_command(repo_id, revision)} with network access, or {switch}"


def _cached_revisions(folder: Path) -> list[str]:
    """``ref -> commit`` for each ref in a cached repository, then any snapshot no ref names."""
    refs = {}
    for path in sorted((folder / "refs").rglob("*")):
        if path.is_file():
            refs[path.relative_to(folder / "refs").as_posix()] = path.read_text(errors="replace").strip()
    snapshots = sorted(path.name for path in (folder / "snapshots").glob("*") if path.is_dir())
    return [f"{ref} -> {commit[:12]}" for ref, commit in refs.items()] + [
        commit for commit in snapshots if commit not in refs.values()]


def _check_complete(snapshot: HubSnapshot, offline: bool) -> None:
    """Refuse a snapshot without config.json or weights, naming whether the cache or the repository lacks them."""
    directory = snapshot.path
    if (directory / CONFIG_FILE).exists():
        missing = [name for name in _weight_names(directory) if not (directory / name).exists()]
    else:
        missing = [CONFIG_FILE]
    if not missing:
        return
    where = f"{snapshot.repo_id} at commit {snapshot.commit} ({directory})"
    if offline:
        raise InputError(f"the cached snapshot of {where} lacks {', '.join(missing)}; "
                         f"{_offline_fix(snapshot.repo_id, snapshot.commit)}")
    raise CheckpointError(f"the Hub repository {where} has no {', '.join(missing)}; repo_lens loads repositories with "
                          f"config.json, safetensors weights ({SINGLE_FILE} or {INDEX_FILE} and its shards; pickled "
                          ".bin weights are never loaded) and tokenizer files. For a GGUF file, download it with "
                          f"`{hub_cli('download')} {snapshot.repo_id} FILE.gguf` and pass its path")
