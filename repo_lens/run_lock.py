"""One writer per run directory: an OS file lock on ``DIRECTORY/.repo_lens.lock``, shared by the
ranks of one distributed run (torchrun / accelerate launch).

The lock is the operating system's, so one left by a killed process is free and taken over; the
file holds the holder's pid, host and command for the message a second writer gets. POSIX uses
``fcntl.flock``; Windows uses ``msvcrt.locking`` on one byte past the holder's details (the
details stay readable; the file is removed after the lock is let go, or left for the next holder
to reuse if another process has it open). A platform with neither refuses to take a run directory
with a :class:`repo_lens.errors.WriteError` saying so. File writes themselves are
:mod:`repo_lens.atomic`, which needs neither.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from repo_lens.atomic import ensure_dir, remove_leftover_temp_files, write_error
from repo_lens.errors import RunInUseError, WriteError

fcntl: ModuleType | None
msvcrt: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None

__all__ = ["LOCK_NAME", "distributed_run_id", "run_lock"]

LOCK_NAME = ".repo_lens.lock"
_WINDOWS_LOCK_OFFSET = 1 << 20  # the byte msvcrt locks: far past the holder's details, which stay readable
_held: dict[Path, int] = {}  # run directories this process holds -> nesting depth
_held_guard = threading.Lock()


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
    command). A lock left by a killed process is free and taken over, and temp files that killed
    writers left in ``directory`` are removed on the way in. Ranks of one distributed run (same
    :func:`distributed_run_id`) share the directory; the same process may nest the lock.

    Example:
        >>> import tempfile
        >>> with run_lock(tempfile.mkdtemp()) as out:
        ...     (out / LOCK_NAME).exists()
        True
    """
    directory = ensure_dir(directory).resolve()
    with _held_guard:
        nested = directory in _held
        if nested:
            _held[directory] += 1
    if nested:
        try:
            yield directory
        finally:
            with _held_guard:
                _held[directory] -= 1
        return
    descriptor = _acquire(directory)
    remove_leftover_temp_files(directory)
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
        _release(descriptor, directory / LOCK_NAME)


def _acquire(directory: Path) -> int | None:
    """Lock ``directory``: the open lock file's descriptor, or None where the holder is another rank
    of this distributed run."""
    lock_path = directory / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300],
          "run_id": distributed_run_id(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    for _ in range(50):
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as error:
            raise write_error(lock_path, error) from error
        if not _try_lock(descriptor, directory):
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
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, json.dumps(me).encode())
        return descriptor
    raise RunInUseError(f"{directory}: could not take {LOCK_NAME} (it keeps changing); is another run starting?")


def _try_lock(descriptor: int, directory: Path) -> bool:
    """Take the OS lock on the open lock file without waiting; False if another process holds it."""
    if fcntl is not None:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    if msvcrt is not None:
        os.lseek(descriptor, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
        except OSError:  # EACCES / EDEADLOCK: locked by another process
            return False
        return True
    os.close(descriptor)
    raise WriteError(f"cannot hold {directory} for one writer: this platform has no file locks (neither fcntl "
                     "nor msvcrt); run on Linux, macOS or Windows")


def _release(descriptor: int, lock_path: Path) -> None:
    """Let go of the lock and remove the lock file. POSIX removes it while still locked (no one can
    take the old file meanwhile); Windows cannot remove an open file, so it closes first and leaves
    a file another process has open to that process."""
    if fcntl is not None:
        lock_path.unlink(missing_ok=True)
        os.close(descriptor)
        return
    os.close(descriptor)  # closing lets go of the msvcrt lock
    try:
        lock_path.unlink(missing_ok=True)
    except PermissionError:  # open in the process that takes the lock next
        pass


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
