"""What the model selector lists: every model that loads offline (the shipped zoo, external zoo
models whose package is installed, local checkpoints under the roots), each with its size, read
from file headers without loading any weights (``safetensors.safe_open``, ``gguf.GGUFReader``; no Streamlit
here). A file that cannot be read is a :class:`repo_lens.CheckpointError` naming it and the fix."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from repo_lens import CheckpointError, InputError, zoo

from repo_lens.app import config
from repo_lens.model.loaders.hf.hub import HubSnapshot


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
    delta = zoo.delta_parts(path)
    if delta is not None:  # a base model and what continued training changed on it
        return _delta_info(source, *delta)
    cfg = json.loads((path / "config.json").read_text())
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else cfg  # repo_lens format, else HF layout
    weights = sorted([*path.glob("*.safetensors"), *path.glob("*.safetensors.xz")])
    return ModelInfo(
        source=source,
        n_layers=_int(model.get("n_layers", model.get("num_hidden_layers"))),
        n_heads=_int(model.get("n_heads", model.get("num_attention_heads"))),
        context=_int(model.get("max_position_embeddings")),
        parameters=sum(_safetensors_parameters(file) for file in weights) or None,
        megabytes=sum(zoo.unpacked_size(file) for file in weights) / 1e6 if weights else None,
    )


def _delta_info(source: str, recipe: dict[str, Any], delta: Path) -> ModelInfo:
    """The base's shape; its parameters plus the delta's new ones (the position modules: the adapters'
    factors are added into the base's weights); megabytes of the base and the delta together."""
    base = model_info(recipe["base"])
    with safe_open(zoo.readable_file(delta), framework="numpy") as weights:
        new = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys() if ".lora_" not in name)
    return dataclasses.replace(base, source=source, parameters=(base.parameters or 0) + new or None,
                               megabytes=(base.megabytes or 0.0) + zoo.unpacked_size(delta) / 1e6)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _safetensors_parameters(file: Path) -> int:
    """Sum of the tensor sizes in a .safetensors file, from its header (no weights read); the per-row scales
    of weights stored quantized are not parameters."""
    try:
        with safe_open(zoo.readable_file(file), framework="numpy") as weights:
            return sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys()
                       if not zoo.is_quantization_scale(name))
    except SafetensorError as error:  # empty, truncated or not safetensors at all
        raise CheckpointError(f"{file} is not a readable safetensors file ({error}); it is empty, truncated or "
                              "corrupt: re-download or re-save the checkpoint, or remove the file") from None


_GGUF_KEYS = {"block_count": "n_layers", "attention.head_count": "n_heads", "context_length": "context"}


def _gguf_info(source: str, path: Path) -> ModelInfo:
    """Layers, heads, context and parameter count from a GGUF's metadata and tensor infos (no weights read)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise CheckpointError(f"reading {path.name} needs the 'gguf' package: pip install 'repo_lens[smollm2]'"
                              ) from None
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as error:  # what a damaged header raises
        raise CheckpointError(f"{path} is not a readable GGUF file ({type(error).__name__}: {error}); it is "
                              "truncated, corrupt or not a GGUF: re-download it") from None
    found = {_GGUF_KEYS[key.split(".", 1)[-1]]: value for key, field in reader.fields.items()
             if key.split(".", 1)[-1] in _GGUF_KEYS and isinstance(value := field.contents(), int)}
    parameters = sum(int(tensor.n_elements) for tensor in reader.tensors)
    return ModelInfo(source=source, parameters=parameters or None, megabytes=path.stat().st_size / 1e6, **found)
