"""Atomic file writes (temporary file in the same directory, then rename), stdlib only.

Readers see the old file or the new one, never a part; a failed write leaves the old file
and no temporary file behind, and is raised as :class:`repo_lens.errors.WriteError` naming the
path, the cause and the remedy. Every file repo_lens writes goes through :func:`atomic_write`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from repo_lens.errors import RunInUseError, WriteError

LOCK_NAME = ".repo_lens.lock"
_held: dict[Path, int] = {}  # run directories this process holds -> nesting depth
_held_guard = threading.Lock()

_REMEDIES = {
    errno.ENOSPC: "free some disk space or write somewhere else",
    errno.EDQUOT: "free some of your disk quota or write somewhere else",
    errno.EFBIG: "the file exceeds the size limit (ulimit -f, or the file system's): raise it or write somewhere else",
    errno.EACCES: "choose a directory you may write to, or fix its permissions",
    errno.EPERM: "choose a directory you may write to, or fix its permissions",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.EISDIR: "the path is a directory: give a file name",
    errno.ENOTDIR: "a part of the path is a file, not a directory: choose another path",
    errno.EEXIST: "a part of the path is a file, not a directory: choose another path",
}


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Let ``write`` fill a temporary path next to ``path``, then rename it over ``path``.

    For writers that want a file name rather than bytes (``safetensors.save_file``,
    ``shutil.copy2``, plotly's exporters). The temporary file exists (empty) when ``write``
    runs, with the usual mode (0666 minus the umask).

    Example:
        >>> import shutil, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "a.txt").write_text("copied")
        >>> atomic_write(folder / "b.txt", lambda temp: shutil.copyfile(folder / "a.txt", temp)).read_text()
        'copied'
        >>> sorted(p.name for p in folder.iterdir())
        ['a.txt', 'b.txt']
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = _new_temp_file(path)
    except OSError as error:
        raise _write_error(path, error) from error
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if isinstance(error, WriteError) or not _is_io_failure(error):
            raise
        raise _write_error(path, error) from error
    return path


def _is_io_failure(error: BaseException) -> bool:
    # Writers built on Rust (safetensors) report a failed write as their own type with "I/O error" in it.
    return isinstance(error, OSError) or (isinstance(error, Exception) and "I/O error" in str(error))


def _write_error(path: Path, error: BaseException) -> WriteError:
    code = getattr(error, "errno", None)
    if code is None:  # a wrapped OS error: recover its code from the message
        code = next((number for number in _REMEDIES if os.strerror(number) in str(error)), None)
    cause = os.strerror(code) if code is not None else str(error)
    remedy = _REMEDIES.get(code, "check the path and the disk") if code is not None else "check the path and the disk"
    failure = WriteError(f"could not write {path}: {cause} ({remedy}); any earlier file there is unchanged")
    failure.errno = code
    failure.filename = str(path)
    return failure


def ensure_dir(path: str | os.PathLike) -> Path:
    """Make the directory ``path`` (and its parents) if missing; a failure is a :class:`WriteError`.

    >>> import tempfile
    >>> ensure_dir(Path(tempfile.mkdtemp()) / "a" / "b").is_dir()
    True
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _write_error(path, error) from error
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out.bin"
    >>> atomic_write_bytes(target, b"done").read_bytes()
    b'done'
    """
    return atomic_write(path, lambda temp: temp.write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8 unless told otherwise).

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out.txt"
    >>> atomic_write_text(target, "位置").read_text(encoding="utf-8")
    '位置'
    """
    return atomic_write(path, lambda temp: temp.write_text(text, encoding=encoding))


def _new_temp_file(path: Path) -> Path:
    # Created with mode 0666 so the umask applies as for any new file (mkstemp would give 0600,
    # and reading the umask means changing it, which races with other threads).
    for _ in range(100):
        temp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(f"could not create a temporary file next to {path}")


def distributed_run_id() -> str | None:
    """The id the ranks of one distributed run share (``REPO_LENS_RUN_ID``, else torchrun's
    ``TORCHELASTIC_RUN_ID`` with the rendezvous address), or None outside a distributed run."""
    if os.environ.get("REPO_LENS_RUN_ID"):
        return os.environ["REPO_LENS_RUN_ID"]
    if "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return ":".join(os.environ.get(name, "") for name in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"))
    return None


@contextmanager
def run_lock(directory: str | os.PathLike) -> Iterator[Path]:
    """Hold ``directory`` as the one writer of a run (made if missing) for the ``with`` block.

    A second process is refused with :class:`RunInUseError` naming the holder (pid, host,
    command). The lock is an OS file lock on ``directory/.repo_lens.lock``, so one left by a
    killed process is free and taken over. Ranks of one distributed run (same
    :func:`distributed_run_id`) share the directory; the same process may nest the lock.

    Example:
        >>> import tempfile
        >>> with run_lock(tempfile.mkdtemp()) as out:
        ...     (out / LOCK_NAME).exists()
        True
    """
    directory = ensure_dir(directory).resolve()
    with _held_guard:
        if directory in _held:
            _held[directory] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield directory
        finally:
            with _held_guard:
                _held[directory] -= 1
        return
    descriptor = _acquire(directory)
    if descriptor is None:  # shared with the other ranks of this distributed run
        yield directory
        return
    with _held_guard:
        _held[directory] = 1
    try:
        yield directory
    finally:
        with _held_guard:
            del _held[directory]
        (directory / LOCK_NAME).unlink(missing_ok=True)
        os.close(descriptor)


def _acquire(directory: Path) -> int | None:
    lock_path = directory / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300],
          "run_id": distributed_run_id(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    for _ in range(50):
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as error:
            raise _write_error(lock_path, error) from error
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            holder = _read_holder(lock_path)
            if me["run_id"] is not None and holder.get("run_id") == me["run_id"]:
                return None
            raise RunInUseError(
                f"{directory} is in use by another run: pid {holder.get('pid', '?')} on {holder.get('host', '?')} "
                f"(command: {holder.get('command', '?')}; since {holder.get('started', '?')}). Wait for it to "
                "finish, or write into another directory") from None
        try:
            same_file = os.fstat(descriptor).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # the holder removed the file after we opened it: lock the new one
            os.close(descriptor)
            continue
        os.ftruncate(descriptor, 0)
        os.write(descriptor, json.dumps(me).encode())
        return descriptor
    raise RunInUseError(f"{directory}: could not take {LOCK_NAME} (it keeps changing); is another run starting?")


def _read_holder(lock_path: Path) -> dict:
    for _ in range(20):  # the holder writes its details just after locking
        try:
            text = lock_path.read_text()
        except OSError:
            text = ""
        if text:
            try:
                return json.loads(text)
            except ValueError:
                pass
        time.sleep(0.05)
    return {}
