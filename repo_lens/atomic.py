"""Atomic file writes (temporary file in the same directory, then rename), stdlib only, on any OS.

Readers see the old file or the new one, never a part; a failed write leaves the old file
and no temporary file behind, and is raised as :class:`repo_lens.errors.WriteError` naming the
path, the cause and the remedy. Every file repo_lens writes goes through :func:`atomic_write`.
(The one-writer-per-run lock is :mod:`repo_lens.run_lock`.)

Temporary files are hidden and named ``.NAME.HOST-PID-RANDOM.tmp`` (HOST: a short hash of the
host name, PID: the writer's process id). A writer killed mid-save (``kill -9``, power loss)
cannot remove its own; the next write into that directory, the next :meth:`Trace.load` of a
file there, the next checkpoint load of it and the next run that takes it
(:func:`repo_lens.run_lock.run_lock`) do: they remove temp files of this naming whose writer ran
on this host and is no longer running, and those from another host untouched for a day. Nothing
else is ever removed, and a live writer's temp file never is. Where a process id cannot be probed
without side effects (Windows), a temp file of this host is also removed only once untouched for
a day. Each process rescans a directory only when it changed since it last looked (its own
writes aside) or a minute has passed; temp files of live writers it saw are rechecked each time.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repo_lens.errors import InputError, WriteError

STALE_FOREIGN_TEMP_S = 24 * 3600  # a temp file from another host untouched this long is a leftover
SWEEP_INTERVAL_S = 60.0  # rescan an unchanged directory at least this often (per process)
_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_TEMP_NAME = re.compile(r"^\..+\.(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]+)-[0-9a-f]{12}\.tmp$")
# os.kill(pid, 0) probes a process on POSIX; on Windows it would terminate it.
_CAN_PROBE_PIDS = os.name == "posix"

_REMEDIES = {
    code: remedy for code, remedy in (
        (errno.ENOSPC, "free some disk space or write somewhere else"),
        (getattr(errno, "EDQUOT", None), "free some of your disk quota or write somewhere else"),
        (errno.EFBIG, "the file exceeds the size limit (ulimit -f, or the file system's): raise it or write "
                      "somewhere else"),
        (errno.EACCES, "choose a directory you may write to, or fix its permissions"),
        (errno.EPERM, "choose a directory you may write to, or fix its permissions"),
        (errno.EROFS, "the file system is read-only: write somewhere else"),
        (errno.EISDIR, "the path is a directory: give a file name"),
        (errno.ENOTDIR, "a part of the path is a file, not a directory: choose another path"),
        (errno.EEXIST, "a part of the path is a file, not a directory: choose another path"),
    ) if code is not None
}


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Let ``write`` fill a temporary path next to ``path``, then rename it over ``path``.

    For writers that want a file name rather than bytes (``safetensors.save_file``,
    ``shutil.copy2``, plotly's exporters). The temporary file exists (empty) when ``write``
    runs, with the usual mode (0666 minus the umask), and the file written has that mode too,
    also where ``write`` replaced the file with one of its own (``safetensors`` makes its 0600).

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
        temp, mode = _new_temp_file(path)
    except OSError as error:
        raise write_error(path, error) from error
    try:
        write(temp)
        if stat.S_IMODE(os.stat(temp).st_mode) != mode:  # a writer that made its own file (safetensors: 0600)
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if isinstance(error, WriteError) or not _is_io_failure(error):
            raise
        raise write_error(path, error) from error
    _note_own_write(path.parent)
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


def write_error(path: Path, error: BaseException) -> WriteError:
    """The :class:`WriteError` for a failed write of ``path``: the cause (from the OS error code,
    also when a library wrapped it) and the remedy."""
    code = getattr(error, "errno", None)
    if code is None:  # a wrapped OS error: recover its code from the message
        code = next((number for number in _REMEDIES if os.strerror(number) in str(error)), None)
    cause = os.strerror(code) if code is not None else str(error)
    remedy = _REMEDIES.get(code, "check the path and the disk") if code is not None else "check the path and the disk"
    failure = WriteError(f"could not write {path}: {cause} ({remedy}); any earlier file there is unchanged")
    failure.errno = code
    failure.filename = str(path)
    return failure


def atomic_write_dir(target: str | os.PathLike, fill: Callable[[Path], object]) -> Path:
    """Write the folder ``target`` whole or not at all: ``fill`` writes its files into a hidden sibling folder,
    which then takes ``target``'s place (an existing ``target`` is replaced, and kept when anything fails).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp()) / "entry"
    >>> _ = atomic_write_dir(folder, lambda temp: (temp / "a.txt").write_text("whole"))
    >>> (folder / "a.txt").read_text(), sorted(p.name for p in folder.parent.iterdir())
    ('whole', ['entry'])
    """
    import shutil

    target = Path(target)
    ensure_dir(target.parent)
    temp = target.with_name(f".{target.name}.writing-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        temp.mkdir()
        fill(temp)
        if target.exists() or target.is_symlink():
            old = target.with_name(f".{target.name}.replaced-{os.getpid()}-{secrets.token_hex(4)}")
            os.replace(target, old)
            try:
                os.replace(temp, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, target)
    except WriteError:
        raise
    except OSError as error:
        raise write_error(target, error) from error
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)
    return target


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
        raise write_error(path, error) from error
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


def _new_temp_file(path: Path) -> tuple[Path, int]:
    """A new empty temp file next to ``path`` and its permission bits: 0666 minus the umask, as ``open(path, "w")``
    gives a new file (mkstemp would give 0600, and reading the umask means changing it, which races with other
    threads); :func:`atomic_write` gives the file back this mode should the writer replace it."""
    for _ in range(100):
        temp = path.parent / f".{path.name}.{_HOST_TAG}-{os.getpid()}-{secrets.token_hex(6)}.tmp"
        try:
            handle = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        try:
            return temp, stat.S_IMODE(os.fstat(handle).st_mode)
        finally:
            os.close(handle)
    raise FileExistsError(f"could not create a temporary file next to {path}")


# ---- leftovers of interrupted saves --------------------------------------------------------------

@dataclass(frozen=True)
class _Look:
    """What this process last saw of a directory: its mtime, when it last scanned it in full, and
    the temp files of live writers it found then (rechecked at every look)."""

    mtime_ns: int
    scanned: float  # time.monotonic()
    pending: tuple[str, ...]


_looks: dict[Path, _Look] = {}
_looks_guard = threading.Lock()


def remove_leftover_temp_files(directory: str | os.PathLike, *, force: bool = False) -> list[Path]:
    """Remove the temp files interrupted saves left in ``directory`` (the rule is in the module's
    docstring); returns the paths removed. Best effort and never raises: what cannot be listed or
    removed stays. ``force`` rescans even a directory unchanged since this process last looked.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> leftover = folder / f".trace.safetensors.{_HOST_TAG}-999999999-0123456789ab.tmp"
        >>> _ = leftover.write_bytes(b"half a save")
        >>> [p.name == leftover.name for p in remove_leftover_temp_files(folder)], leftover.exists()
        ([True], False)
    """
    try:
        directory = Path(directory)
        key = directory.resolve()
        mtime_ns = os.stat(directory).st_mtime_ns
    except (OSError, RuntimeError, ValueError, TypeError):
        return []
    now = time.monotonic()
    with _looks_guard:
        look = _looks.get(key)
    if force or look is None or look.mtime_ns != mtime_ns or now - look.scanned >= SWEEP_INTERVAL_S:
        names = _temp_names(directory)
        if names is None:
            return []
        scanned = now
    else:
        names, scanned = list(look.pending), look.scanned
    removed, pending = [], []
    for name in names:
        verdict = _remove_if_leftover(directory / name, name)
        if verdict is True:
            removed.append(directory / name)
        elif verdict is None:
            pending.append(name)
    if removed:  # our removals changed the directory
        try:
            mtime_ns = os.stat(directory).st_mtime_ns
        except OSError:
            pass
    with _looks_guard:
        _looks[key] = _Look(mtime_ns, scanned, tuple(pending))
    return removed


def _temp_names(directory: Path) -> list[str] | None:
    """The names in ``directory`` that follow the temp file naming (None if it cannot be listed)."""
    try:
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries if entry.name.startswith(".") and _TEMP_NAME.match(entry.name)]
    except OSError:
        return None


def _remove_if_leftover(path: Path, name: str) -> bool | None:
    """True: a leftover, removed. None: a temp file of a writer that may still be running (look
    again later). False: nothing to do (gone, not a regular file, or could not be removed)."""
    match = _TEMP_NAME.match(name)
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if match is None or not stat.S_ISREG(info.st_mode):
        return False
    if match["host"] == _HOST_TAG and int(match["pid"]) == os.getpid():
        return None  # this process's own write, under way
    if match["host"] == _HOST_TAG and _CAN_PROBE_PIDS:
        dead = not _process_alive(int(match["pid"]))
    else:
        dead = time.time() - info.st_mtime > STALE_FOREIGN_TEMP_S
    if not dead:
        return None
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # alive, but another user's
        return True
    except (ProcessLookupError, OverflowError):  # gone, or a pid this system cannot have
        return False
    return True


def _note_own_write(directory: Path) -> None:
    """After this process wrote into ``directory``: its new mtime is no sign of another writer."""
    try:
        key = directory.resolve()
        mtime_ns = os.stat(directory).st_mtime_ns
    except (OSError, RuntimeError, ValueError):
        return
    with _looks_guard:
        look = _looks.get(key)
        if look is not None:
            _looks[key] = _Look(mtime_ns, look.scanned, look.pending)
