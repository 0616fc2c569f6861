"""Weights shipped xz-compressed: ``model.safetensors.xz`` (or ``delta.safetensors.xz``) in place of the
safetensors file. The zoo ships its weights this way: bf16 weights compress losslessly to about 71 % with
xz, which keeps the repository small enough to travel whole. A checkpoint holds either the file or its
packed twin; a load reads the packed file's unpacked copy, made once in the user's cache
(``$REPO_LENS_CACHE``, else ``~/.cache/repo_lens``) under the packed file's SHA-256, so a re-shipped
model never meets a stale copy. xz checks its own SHA-256 of the content while unpacking: a damaged file
fails loudly, never loads.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "w.safetensors").write_bytes(b"weights" * 100)
    >>> packed = pack_file(folder / "w.safetensors", folder / "w.safetensors.xz")
    >>> (folder / "w.safetensors").unlink()
    >>> shipped_file(folder / "w.safetensors").name
    'w.safetensors.xz'
    >>> readable_file(packed).read_bytes() == b"weights" * 100
    True
"""

from __future__ import annotations

import hashlib
import lzma
import os
import tempfile
from pathlib import Path

from repo_lens.atomic import atomic_write, atomic_write_bytes, ensure_dir
from repo_lens.errors import CheckpointError

PACKED_SUFFIX = ".xz"
CACHE_ENV = "REPO_LENS_CACHE"


def packed_twin(path: Path) -> Path:
    """``path`` with ``.xz`` appended: where its packed form lies.

    >>> packed_twin(Path("ckpt/model.safetensors")).name
    'model.safetensors.xz'
    """
    return path.with_name(path.name + PACKED_SUFFIX)


def is_packed(path: Path) -> bool:
    return path.name.endswith(PACKED_SUFFIX)


def shipped_file(path: Path) -> Path:
    """The file a checkpoint holds for ``path``: ``path`` itself when it is there (or a link), else its
    packed twin when that is, else ``path`` (so that the caller's error names the file it expected)."""
    if path.exists() or path.is_symlink():
        return path
    twin = packed_twin(path)
    return twin if twin.exists() or twin.is_symlink() else path


def cache_dir() -> Path:
    """Where unpacked copies go: ``$REPO_LENS_CACHE``, else ``~/.cache/repo_lens``, else the temp folder."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser() / "unpacked"
    home = Path.home() / ".cache" / "repo_lens" / "unpacked"
    try:
        return ensure_dir(home)
    except OSError:
        return Path(tempfile.gettempdir()) / "repo_lens-unpacked"


def readable_file(path: Path) -> Path:
    """The file to open for ``path``: ``path`` itself, or, for a packed file, its unpacked copy in the
    cache (unpacked now if it is not there yet)."""
    if not is_packed(path):
        return path
    try:
        packed = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read ({error}); restore it from the checkpoint's source") from None
    digest = hashlib.sha256(packed).hexdigest()[:32]
    target = cache_dir() / f"{digest}-{path.name[:-len(PACKED_SUFFIX)]}"
    if target.is_file():
        return target
    try:
        content = lzma.decompress(packed, format=lzma.FORMAT_XZ)
    except lzma.LZMAError as error:
        raise CheckpointError(f"{path} is damaged ({error}): it does not unpack to the weights it was packed "
                              "from; restore it from the checkpoint's source") from None
    try:
        atomic_write_bytes(ensure_dir(target.parent) / target.name, content)
    except OSError as error:
        raise CheckpointError(f"cannot unpack {path} into {target.parent} ({error}); set {CACHE_ENV} to a "
                              "writable folder") from None
    return target


def unpacked_size(path: Path) -> int:
    """Bytes of the weights ``path`` holds (the unpacked size of a packed file)."""
    return readable_file(path).stat().st_size


def pack_file(source: Path, target: Path) -> Path:
    """Write ``source`` xz-compressed (preset 9, SHA-256 check) to ``target``, atomically; returns ``target``."""
    data = Path(source).read_bytes()
    packed = lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_SHA256, preset=9)
    return atomic_write(target, lambda temp: Path(temp).write_bytes(packed))
