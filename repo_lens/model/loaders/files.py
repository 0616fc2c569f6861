"""Safe opening of the files a checkpoint load reads: regular files only (a FIFO or a device such as
``/dev/zero`` would hang or exhaust memory), JSON files only up to a size cap, checked with
``os.stat`` before anything is opened."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError

JSON_MAX_BYTES = 16 * 1024 * 1024  # config.json, model.safetensors.index.json, tokenizer_config.json, ...


def regular_file(path: Path, what: str) -> os.stat_result:
    """``os.stat(path)`` (symlinks followed) after checking that ``path`` is a regular file.

    Example:
        >>> regular_file(Path("/dev/null"), "config.json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: /dev/null (config.json) is a character device, not a regular file; ...
    """
    try:
        status = os.stat(path)
    except OSError as error:
        raise _unreadable(path, what, error) from None
    return _require_regular(path, what, status)


def _unreadable(path: Path, what: str, error: OSError) -> CheckpointError:
    if isinstance(error, FileNotFoundError):
        return CheckpointError(f"{path} ({what}) does not exist; the checkpoint needs it as a regular file")
    return CheckpointError(f"{path} ({what}) cannot be read ({error.strerror}); it must be a readable regular file")


def _require_regular(path: Path, what: str, status: os.stat_result) -> os.stat_result:
    if not stat.S_ISREG(status.st_mode):
        raise CheckpointError(f"{path} ({what}) is {_file_kind(status.st_mode)}, not a regular file; replace it "
                              f"with the {what} file itself")
    return status


def _file_kind(mode: int) -> str:
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_json_file(path: Path, what: str, max_bytes: int = JSON_MAX_BYTES,
                   object_pairs_hook: Any = None) -> dict[str, Any]:
    """The JSON object in ``path``: a regular file of at most ``max_bytes``, valid UTF-8 JSON, an object.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "config.json"
        >>> _ = path.write_text('{"hidden_size": 64}')
        >>> read_json_file(path, "config.json")
        {'hidden_size': 64}
    """
    try:  # O_NONBLOCK: opening a FIFO returns at once, and fstat of the opened file then refuses it
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise _unreadable(path, what, error) from None
    try:
        size = _require_regular(path, what, os.fstat(descriptor)).st_size
    except CheckpointError:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as file:
        if size > max_bytes:
            raise CheckpointError(f"{path} ({what}) is {size:,} bytes, over the {max_bytes:,}-byte limit for "
                                  f"{what}; a real one is far smaller, so this is not one")
        raw = file.read(max_bytes + 1)
    try:
        data = json.loads(raw, object_pairs_hook=object_pairs_hook)
    except (ValueError, RecursionError) as error:  # invalid JSON or UTF-8, or an integer of thousands of digits
        raise CheckpointError(f"{path} is not valid JSON ({type(error).__name__}: {error}); {what} must be a "
                              "UTF-8 JSON object") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object, found {type(data).__name__}")
    return data


def inside(directory: Path, name: Any, listed_in: Path) -> Path:
    """``directory / name`` for a file name read from ``listed_in`` (a shard index), refused unless it is
    a relative name whose real path (symlinks resolved) lies inside ``directory`` (or, for a snapshot of the
    Hugging Face cache, inside its repository's ``blobs`` folder, where the cache keeps every file).

    Example:
        >>> index = Path("/ckpt/model.safetensors.index.json")
        >>> inside(Path("/ckpt"), "../secret.safetensors", index)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: ... names '../secret.safetensors', which is outside the checkpoint ...
    """
    if not isinstance(name, str) or not name.strip():
        raise CheckpointError(f"{listed_in} names the file {name!r}; expected a non-empty file name (str) of a "
                              f"file in {directory}")
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts or "\\" in name or "\x00" in name:
        raise CheckpointError(f"{listed_in} names {name!r}, which is outside the checkpoint directory "
                              f"{directory}; expected a relative file name inside it")
    path = directory / relative
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    blobs = hub_blobs(root)
    if not real.is_relative_to(root) and not (blobs is not None and real.is_relative_to(blobs)):
        raise CheckpointError(f"{listed_in} names {name!r}, a symlink to {real}, which is outside the checkpoint "
                              f"directory {directory}; put the file itself inside the directory")
    return path


def hub_blobs(directory: Path) -> Path | None:
    """For a snapshot folder of the Hugging Face cache (``models--ORG--NAME/snapshots/COMMIT``), the
    repository's ``blobs`` folder, which every file of the snapshot links into; None for any other folder.

    Example:
        >>> hub_blobs(Path("/cache/models--org--name/snapshots/0123abcd")).as_posix()
        '/cache/models--org--name/blobs'
        >>> hub_blobs(Path("/ckpt")) is None
        True
    """
    if directory.parent.name == "snapshots" and directory.parent.parent.name.startswith("models--"):
        return directory.parent.parent / "blobs"
    return None
