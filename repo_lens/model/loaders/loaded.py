"""What every loader returns, and the strict build step the directory and GGUF loaders share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig
from repo_lens.model.loaders.weights import load_weights_strict
from repo_lens.model.transformer import LensModel


@dataclass
class LoadedModel:
    """A loaded model, its tokenizer (None when the checkpoint has none) and what was loaded
    (``meta``: source, format, name, dtype, device, ...). ``repo_lens.load`` wraps it in a ``Lens``.

    Example:
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope"])
        >>> loaded = LoadedModel(LensModel(cfg), tokenizer=None, meta={"name": "random"})
        >>> loaded.meta["name"], loaded.model.cfg.n_layers
        ('random', 1)
    """

    model: LensModel
    tokenizer: Any
    meta: dict[str, Any] = field(default_factory=dict)


def build_strict(
    model_config: ModelConfig, tensors: dict[str, torch.Tensor], rename: Callable[[str], str],
    dtype: torch.dtype, device: torch.device,
) -> LensModel:
    """A LensModel for ``model_config`` holding exactly ``tensors`` (renamed to module paths by
    ``rename``) in ``dtype`` on ``device``, in eval mode; missing, surplus or misshapen weights
    raise a CheckpointError naming them.

    Example:
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> cfg = ModelConfig(family="llama", vocab_size=257, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope"])
        >>> weights = LensModel(cfg).state_dict()
        >>> model = build_strict(cfg, weights, rename=str, dtype=torch.float32, device=torch.device("cpu"))
        >>> model.training, torch.equal(model.embed.weight, weights["embed.weight"])
        (False, True)
    """
    _check_layer_count(model_config, tensors, rename)
    with torch.device("meta"):
        model = LensModel(model_config)
    load_weights_strict(model, tensors, rename=rename, dtype=dtype, device=device)
    return model.eval()


def _check_layer_count(model_config: ModelConfig, tensors: dict[str, torch.Tensor],
                       rename: Callable[[str], str]) -> None:
    """Refuse a config whose layer count the weights do not have before the model is built (a count
    of 10**12 would exhaust memory building empty layers)."""
    layers = set()
    for name in tensors:
        parts = rename(name).split(".")
        if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit():
            layers.add(int(parts[1]))
    if layers and len(layers) != model_config.n_layers:
        raise CheckpointError(f"the config says {model_config.n_layers} layers but the weights hold {len(layers)} "
                              f"(blocks {min(layers)}..{max(layers)}); expected a config and weights of the same model")


def dtype_name(dtype: torch.dtype) -> str:
    """The short name ``meta["dtype"]`` records.

    >>> dtype_name(torch.bfloat16)
    'bfloat16'
    """
    return str(dtype).replace("torch.", "")
