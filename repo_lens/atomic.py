"""Atomic file writes (temporary file in the same directory, then rename), stdlib only.

Readers see the old file or the new one, never a part; a failed write leaves the old file
and no temporary file behind, and is raised as :class:`repo_lens.errors.WriteError` naming the
path, the cause and the remedy. Every file repo_lens writes goes through :func:`atomic_write`.

Temporary files are hidden and named ``.NAME.HOST-PID-RANDOM.tmp`` (HOST: a short hash of the
host name, PID: the writer's process id). A writer killed mid-save (``kill -9``, power loss)
cannot remove its own; the next save into that directory does (at most one sweep per directory
and minute in a process): it removes temp files of this naming whose writer ran on this host
and is no longer running, and those from another host untouched for a day. Nothing else is
ever removed, and a live writer's temp file never is.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from repo_lens.errors import InputError, RunInUseError, WriteError

LOCK_NAME = ".repo_lens.lock"
_held: dict[Path, int] = {}  # run directories this process holds -> nesting depth
_held_guard = threading.Lock()
STALE_FOREIGN_TEMP_S = 24 * 3600  # a temp file from another host untouched this long is a leftover
SWEEP_INTERVAL_S = 60.0  # sweep one directory at most this often (per process)
_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_TEMP_NAME = re.compile(r"^\..+\.(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]+)-[0-9a-f]{12}\.tmp$")
_swept: dict[Path, float] = {}  # directory -> time.monotonic() of this process's last sweep there

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
    path = _target_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_leftover_temp_files(path.parent)
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


def _target_path(path: object) -> Path:
    """``path`` as a Path to write a regular file to: a str or os.PathLike, not empty, without NUL
    characters, and not an existing device, FIFO or socket (a rename would replace the device node)."""
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"the output path must be a str or os.PathLike, not {type(path).__name__}; pass a file path")
    text = os.fspath(path)
    if isinstance(text, bytes) or not text or "\x00" in text:
        raise InputError(f"the output path {text!r} is not a usable file name (empty, bytes or a NUL character); "
                         "pass a file path as str")
    target = Path(text)
    try:
        mode = target.stat().st_mode
    except (OSError, ValueError):
        return target
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
        raise WriteError(f"could not write {target}: it is a {kind}, not a regular file (saving would replace it); "
                         "choose a file path")
    return target


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
        temp = path.parent / f".{path.name}.{_HOST_TAG}-{os.getpid()}-{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(f"could not create a temporary file next to {path}")


def remove_leftover_temp_files(directory: str | os.PathLike, *, force: bool = False) -> list[Path]:
    """Remove the temp files interrupted saves left in ``directory`` (the rule is in the module's
    docstring); returns the paths removed. Best effort: what cannot be listed or removed stays.
    ``force`` sweeps even if this process swept the directory within the last minute.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> leftover = folder / f".trace.safetensors.{_HOST_TAG}-999999999-0123456789ab.tmp"
        >>> _ = leftover.write_bytes(b"half a save")
        >>> [p.name == leftover.name for p in remove_leftover_temp_files(folder)], leftover.exists()
        ([True], False)
    """
    directory = Path(directory)
    now = time.monotonic()
    key = directory.resolve()
    if not force and now - _swept.get(key, -SWEEP_INTERVAL_S) < SWEEP_INTERVAL_S:
        return []
    _swept[key] = now
    removed = []
    try:
        entries = [entry for entry in os.scandir(directory) if entry.name.startswith(".")]
    except OSError:
        return []
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match is None or not _is_leftover(entry, match["host"], int(match["pid"])):
            continue
        try:
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _is_leftover(entry: os.DirEntry, host: str, pid: int) -> bool:
    try:
        if not entry.is_file(follow_symlinks=False):
            return False
        if host != _HOST_TAG:
            return time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_FOREIGN_TEMP_S
    except OSError:
        return False
    return not _process_alive(pid)


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except PermissionError:  # alive, but another user's
        return True
    except (ProcessLookupError, OverflowError):  # gone, or a pid this system cannot have
        return False
    return True


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
