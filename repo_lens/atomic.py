"""Atomic file writes (temporary file in the same directory, then rename), stdlib only.

Readers see the old file or the new one, never a part; a failed write leaves the old file
and no temporary file behind. Every file repo_lens writes goes through :func:`atomic_write`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


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
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _new_temp_file(path)
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
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
