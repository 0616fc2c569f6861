"""What the model selector lists: every model that loads offline (the shipped zoo, external zoo
models whose package is installed, local checkpoints under the roots), each with its size, read
from file headers without loading any weights (no Streamlit here)."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from repo_lens import InputError, zoo

from repo_lens.app import config
from repo_lens.model.loaders.hub import HubSnapshot


@dataclass(frozen=True)
class ModelInfo:
    """Size of one model: ``None`` where its files do not say."""

    source: str
    n_layers: int | None = None
    n_heads: int | None = None
    context: int | None = None
    parameters: int | None = None
    megabytes: float | None = None

    def describe(self) -> str:
        """e.g. ``"16×16 · ctx 8,192 · 4.2M params · 17 MB"``."""
        parts = []
        if self.n_layers and self.n_heads:
            parts.append(f"{self.n_layers}×{self.n_heads}")
        if self.context:
            parts.append(f"ctx {self.context:,}")
        if self.parameters:
            parts.append(f"{_short(self.parameters)} params")
        if self.megabytes is not None:
            parts.append(f"{self.megabytes:,.0f} MB" if self.megabytes >= 10 else f"{self.megabytes:.1f} MB")
        return " · ".join(parts)


def _short(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def model_sources(roots: list[Path] | None = None) -> list[str]:
    """The zoo (shipped, then external models whose package is installed), then the checkpoints under the roots."""
    shipped = set(zoo.available_models())
    external = [zoo.zoo_source(entry["name"]) for entry in zoo.zoo_entries()
                if entry["name"] not in shipped and _installed(entry["name"])]
    return config.zoo_sources() + external + config.discover_checkpoints(roots)


def _installed(name: str) -> bool:
    try:
        zoo.resolve_zoo_name(name)
    except InputError:
        return False
    return True


def model_info(source: str, snapshot: HubSnapshot | None = None) -> ModelInfo:
    """The size of ``source`` ("zoo:NAME", a checkpoint directory under a root or a Hub id, read in the
    Hub cache's ``snapshot`` if given), from its headers."""
    path = config.model_path(source, snapshot)
    if path.is_file():
        return _gguf_info(source, path)
    cfg = json.loads((path / "config.json").read_text())
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else cfg  # repo_lens format, else HF layout
    weights = sorted(path.glob("*.safetensors"))
    return ModelInfo(
        source=source,
        n_layers=_int(model.get("n_layers", model.get("num_hidden_layers"))),
        n_heads=_int(model.get("n_heads", model.get("num_attention_heads"))),
        context=_int(model.get("max_position_embeddings")),
        parameters=sum(_safetensors_parameters(file) for file in weights) or None,
        megabytes=sum(file.stat().st_size for file in weights) / 1e6 if weights else None,
    )


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _safetensors_parameters(file: Path) -> int:
    """Sum of the tensor sizes in a .safetensors header (the 8-byte length, then JSON)."""
    with open(file, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > 100_000_000:
            return 0
        header = json.loads(handle.read(length))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


# GGUF value types (gguf spec): fixed-size scalars by struct code; 8 = string, 9 = array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_KEYS = {"block_count": "n_layers", "attention.head_count": "n_heads", "context_length": "context"}


def _gguf_info(source: str, path: Path) -> ModelInfo:
    """Layers, heads, context and parameter count from a GGUF header (metadata and tensor infos only)."""
    found: dict[str, int] = {}
    parameters = 0
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise InputError(f"{path.name} is not a GGUF file (no GGUF magic number)")
        _version, n_tensors, n_values = struct.unpack("<IQQ", handle.read(20))
        for _ in range(n_values):
            key = _gguf_string(handle)
            value = _gguf_value(handle, struct.unpack("<I", handle.read(4))[0])
            suffix = key.split(".", 1)[-1]
            if suffix in _GGUF_KEYS and isinstance(value, int):
                found[_GGUF_KEYS[suffix]] = value
        for _ in range(n_tensors):
            _gguf_string(handle)
            (n_dims,) = struct.unpack("<I", handle.read(4))
            parameters += math.prod(struct.unpack(f"<{n_dims}Q", handle.read(8 * n_dims)))
            handle.read(12)  # type (u32) and offset (u64)
    return ModelInfo(source=source, parameters=parameters or None, megabytes=path.stat().st_size / 1e6, **found)


def _gguf_string(handle: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", handle.read(8))
    return handle.read(length).decode("utf-8", "replace")


def _gguf_value(handle: BinaryIO, kind: int) -> Any:
    if kind in _GGUF_SCALARS:
        code = _GGUF_SCALARS[kind]
        return struct.unpack(f"<{code}", handle.read(struct.calcsize(code)))[0]
    if kind == 8:
        return _gguf_string(handle)
    if kind == 9:
        item_kind, count = struct.unpack("<IQ", handle.read(12))
        if item_kind in _GGUF_SCALARS:  # skip numeric arrays without decoding them
            handle.seek(count * struct.calcsize(_GGUF_SCALARS[item_kind]), 1)
            return None
        for _ in range(count):
            _gguf_value(handle, item_kind)
        return None
    raise InputError(f"unknown GGUF value type {kind}; the file may be corrupt")
