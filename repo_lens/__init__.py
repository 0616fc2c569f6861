"""repo_lens: look at the positions language models learn.

Example:
    >>> import repo_lens
    >>> lens = repo_lens.load("/path/to/checkpoint")        # doctest: +SKIP
    >>> trace = lens.trace("The needle is in the haystack")  # doctest: +SKIP
    >>> trace.positions.shape                                # doctest: +SKIP
    (16, 16, 8)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from repo_lens.errors import CheckpointError, InputError, RepoLensError, TraceFileError

if TYPE_CHECKING:
    from repo_lens.lens import Lens
    from repo_lens.trace import Trace

__all__ = ["CheckpointError", "InputError", "Lens", "RepoLensError", "Trace", "TraceFileError", "load"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # torch and transformers load only when a model or trace is used, so the numpy-only
    # analyzers import fast
    if name == "Lens":
        from repo_lens.lens import Lens

        return Lens
    if name == "Trace":
        from repo_lens.trace import Trace

        return Trace
    raise AttributeError(f"module 'repo_lens' has no attribute {name!r}")


def load(source: str | os.PathLike, device: Any = "auto", dtype: Any = None, device_map: Any = None,
         max_memory: Any = None) -> "Lens":
    """Load a checkpoint directory (published RePo-OLMo2 layout, stock HF OLMo-2/Llama, or repo_lens'
    own format) into a :class:`Lens`. ``device="auto"`` picks CUDA + bf16 when present, else CPU + fp32.
    ``device_map`` ("auto", "balanced", or a dict) spreads a big model over several GPUs with
    accelerate, whole blocks per device (docs/big_checkpoints.md)."""
    from repo_lens.model.loaders import load_checkpoint

    text = str(source)
    if text.startswith("zoo:"):
        from repo_lens.zoo import resolve_zoo_name

        source = resolve_zoo_name(text[len("zoo:"):])
    from repo_lens.lens import Lens

    if device_map is not None:
        from repo_lens.model.loaders.device_map import load_dispatched

        return load_dispatched(source, device_map=device_map, dtype=dtype, max_memory=max_memory)
    loaded = load_checkpoint(source, device=device, dtype=dtype)
    return Lens(loaded.model, loaded.tokenizer, loaded.meta)
