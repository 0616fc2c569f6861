"""The one ``load()``: a zoo name, a checkpoint directory, a GGUF file or a Hub id becomes a :class:`Lens`.

Sources are resolved here (``zoo:NAME`` through :mod:`repo_lens.zoo`, ``org/name`` through
:mod:`repo_lens.model.loaders.hf.hub`), loaded by the loaders in
:mod:`repo_lens.model.loaders` (which return a plain model + tokenizer + meta) and wrapped in a
``Lens``. ``repo_lens.load`` is this function.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repo_lens.errors import CheckpointError, InputError
from repo_lens.lens import Lens
from repo_lens.model.loaders import checkpoint_files as _checkpoint_files
from repo_lens.model.loaders import LoadedModel, load_checkpoint
from repo_lens.model.loaders.device_map import load_dispatched
from repo_lens.model.loaders.hf.hub import HubSnapshot, download_snapshot, is_hub_id
from repo_lens.model.loaders.increments_post.graft import Graft, graft_onto, read_graft
from repo_lens.options import grouped_keywords, keyword_only, options_or_default
from repo_lens.zoo import parse_zoo_name, resolve_source


@dataclass(frozen=True, kw_only=True)
class HubAccess:
    """How :func:`load` and :func:`checkpoint_files` reach the Hugging Face Hub for an ``"org/name"`` source:
    ``token`` (a str, or True for the saved login) for gated or private repositories, and
    ``local_files_only=True`` to read the Hub cache only, with no network call (as ``HF_HUB_OFFLINE=1``).

    Example:
        >>> lens = load("SakanaAI/RePo-OLMo2-1B-stage2-L5", hub_access=HubAccess(local_files_only=True))  # doctest: +SKIP
        >>> HubAccess(token="hf_...").local_files_only is None
        True
    """

    token: str | bool | None = None
    local_files_only: bool | None = None


@keyword_only(1, ("device", "dtype", "device_map", "max_memory"))
@grouped_keywords("hub_access", HubAccess)
def load(source: str | os.PathLike, *, device: Any = "auto", dtype: Any = None, device_map: Any = None,
         max_memory: dict | None = None, revision: str | None = None, graft: str | os.PathLike | None = None,
         hub_access: HubAccess | None = None) -> Lens:
    """Load ``source`` into a :class:`Lens`: ``"zoo:NAME"`` (a shipped or installed zoo model), a
    checkpoint directory (published RePo-OLMo2 layout, stock HF OLMo-2/Llama, or repo_lens' own
    format), a Llama-family ``.gguf`` file, or a Hugging Face Hub id ``"org/name"``.

    A string names a local path when that path exists, else ``"org/name"`` is a Hub repository: only the
    files the load reads (config.json, safetensors weights or shards, tokenizer files) are fetched into
    the standard Hub cache, at ``revision`` (a branch, a tag or a commit hash; default the latest on
    ``main``); ``hub_access`` (:class:`HubAccess`) gives a token for gated or private repositories, or reads
    the cache only (as ``HF_HUB_OFFLINE=1`` does). ``lens.meta["hub"]`` (and every trace's meta) records the
    repository, the revision asked for and the commit it resolved to.

    ``device="auto"`` picks CUDA + bf16 when present, else CPU + fp32. ``device_map`` ("auto",
    "balanced", or a dict) spreads a big model over several GPUs with accelerate, whole blocks per
    device, within ``max_memory`` ([Running big checkpoints on GPUs][big-checkpoints]).

    ``graft`` (the path of a ``delta_mlp.pt`` from the learned-increments post's graft, "Learned position
    increments", Brendan Long) puts that file's DeltaMLP onto ``source``, the Llama-family RoPE model it was
    trained on: every layer then rotates by the exclusive running sum of δ = softplus(DeltaMLP(embedding))
    (kind ``lpi-graft``). The file holds only the DeltaMLP; ``lens.meta["authors"]["notes"]`` says what the
    post trained beside it.

    Example:
        >>> lens = load("zoo:bytes-repo", device="cpu")
        >>> lens.meta["name"], lens.trace("hi").positions.shape
        ('bytes-repo', (6, 4, 2))
        >>> load("zoo:no-such-model")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.InputError: unknown zoo model 'no-such-model'; available: bytes-cope, ...
        >>> lens = load("SakanaAI/RePo-OLMo2-1B-stage2-L5", revision="main")  # doctest: +SKIP
        >>> lens.meta["hub"]  # doctest: +SKIP
        {'repo_id': 'SakanaAI/RePo-OLMo2-1B-stage2-L5', 'revision': 'main', 'commit': '...'}
    """
    grafted = _read_graft(graft, device_map)  # a bad graft file fails before the base loads
    path, hub = _resolve(source, revision, options_or_default(hub_access, HubAccess, "hub_access"))
    if max_memory is not None and not isinstance(max_memory, dict):
        raise InputError(f"max_memory must be a dict such as {{0: '20GiB', 'cpu': '64GiB'}}, not "
                         f"{type(max_memory).__name__}")
    if device_map is not None:
        loaded = load_dispatched(path, device_map=device_map, dtype=dtype, max_memory=max_memory)
    else:
        loaded = load_checkpoint(path, device=device, dtype=dtype, resolve_base=resolve_source)
    if hub is not None:
        loaded = LoadedModel(loaded.model, loaded.tokenizer, {**loaded.meta, "name": hub.repo_id, "hub": hub.meta()})
    if grafted is not None:
        loaded = graft_onto(loaded, grafted)
    return Lens(loaded.model, loaded.tokenizer, dict(loaded.meta))


def _read_graft(graft: Any, device_map: Any) -> Graft | None:
    """The checked graft file ``graft`` names (None: no graft)."""
    if graft is None:
        return None
    if not isinstance(graft, (str, os.PathLike)) or isinstance(os.fspath(graft), bytes) or not os.fspath(graft) \
            or "\x00" in os.fspath(graft):
        raise InputError(f"graft must be the path of the learned-increments post's delta_mlp.pt (a str or "
                         f"os.PathLike), not {graft!r:.80}")
    if device_map is not None:
        raise InputError("graft puts a DeltaMLP onto a base loaded on one device; leave out device_map (load the base "
                         "with device=...)")
    return read_graft(Path(graft).expanduser())


@grouped_keywords("hub_access", HubAccess)
def checkpoint_files(source: str | os.PathLike, *, revision: str | None = None,
                     hub_access: HubAccess | None = None) -> list[Path]:
    """Every file ``load(source)`` opens (config.json, weights or shard index + shards, tokenizer files;
    for a .gguf, the file), unresolved, so a caller can check each real path before loading (the app
    checks them against its roots). Broken configs or shard indices raise CheckpointError as ``load`` does.
    A Hub id is fetched first (as ``load`` would); its files lie in the Hub cache's snapshot folder.

    Example:
        >>> [path.name for path in checkpoint_files("zoo:bytes-repo")]
        ['config.json', 'model.safetensors.xz']
    """
    access = options_or_default(hub_access, HubAccess, "hub_access")
    return _checkpoint_files(_resolve(source, revision, access)[0], resolve_source)


def source_kind(source: str | os.PathLike) -> str:
    """How :func:`load` reads ``source``: ``"zoo"``, ``"path"`` (an existing path, or a string that is
    not a Hub id) or ``"hub"`` (an ``"org/name"`` that is not an existing local path).

    Example:
        >>> [source_kind(text) for text in ("zoo:bytes-repo", "SakanaAI/RePo-OLMo2-1B-stage2-L5", "/no/such/dir")]
        ['zoo', 'hub', 'path']
    """
    _check_source_type(source)
    if parse_zoo_name(source) is not None:
        return "zoo"
    if isinstance(source, str) and is_hub_id(source) and not _exists(Path(source).expanduser()):
        return "hub"
    return "path"


def _resolve(source: Any, revision: str | None, access: HubAccess) -> tuple[Path, HubSnapshot | None]:
    """The local path to load for ``source``, and for a Hub id where its snapshot came from."""
    kind = source_kind(source)
    if kind == "hub":
        hub = download_snapshot(os.fspath(source), revision=revision, token=access.token,
                                local_files_only=access.local_files_only)
        return hub.path, hub
    if revision is not None:
        raise InputError(f"revision={revision!r} applies only to a Hugging Face Hub id 'org/name'; "
                         f"{os.fspath(source)!r:.200} is a {'zoo model' if kind == 'zoo' else 'local path'}")
    path = _source_path(source)
    if kind == "path" and not _exists(path):
        raise CheckpointError(f"{path} does not exist; pass a checkpoint directory or .gguf file, 'zoo:NAME' or a "
                              "Hugging Face Hub id 'org/name'")
    return path, None


def _check_source_type(source: Any) -> None:
    if not isinstance(source, (str, os.PathLike)) or isinstance(os.fspath(source), bytes):
        raise InputError(f"source must be 'zoo:NAME', a path or a Hub id 'org/name' (str or os.PathLike), not "
                         f"{type(source).__name__}")
    if not os.fspath(source) or "\x00" in os.fspath(source):
        raise InputError(f"source {os.fspath(source)!r} is empty or holds a NUL character; pass 'zoo:NAME', a path "
                         "or a Hub id 'org/name'")


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except (OSError, RuntimeError):  # a name too long, a symlink loop, '~user' of no user: a path to report
        return True


def _source_path(source: Any) -> Path:
    try:
        path = resolve_source(source)
        path.stat()
    except FileNotFoundError:
        return path
    except (OSError, RuntimeError) as error:  # a name too long, a symlink loop, '~user' of no user
        reason = getattr(error, "strerror", None) or str(error)
        raise InputError(f"cannot use the source {os.fspath(source)!r:.200}: {reason}; "
                         "pass 'zoo:NAME' or the path of a checkpoint directory or .gguf file") from None
    return path
