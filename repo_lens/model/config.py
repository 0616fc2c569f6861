"""The architecture description every repo_lens model is built from."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.compat.config import TransformerLensConfigFields
from repo_lens.model.former_names import current_config_keys
from repo_lens.model.mechanism_table import current_kinds, renamed_message

BLOCK_FAMILIES = ("olmo2", "llama", "authors", "cope")  # authors: the GRAPE / FoX authors' pre-norm blocks; cope:
# the CoPE authors' decoder (built by repo_lens.model.authors.cope_model.CopeModel)


@dataclass
class ModelConfig(TransformerLensConfigFields):
    """Shapes, block family and the position mechanism of each layer.

    It also answers the TransformerLens configuration names its utilities read (``d_vocab``, ``n_ctx``,
    ``device``, …; :class:`repo_lens.model.compat.config.TransformerLensConfigFields`).

    Example:
        >>> cfg = ModelConfig(family="olmo2", vocab_size=64, d_model=32, n_layers=3, n_heads=4,
        ...                   d_mlp=64, layer_mechanisms=["rope", "repo", "repo"])
        >>> cfg.d_head, cfg.d_position
        (8, 4)
    """

    family: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_mlp: int
    layer_mechanisms: list[str]
    n_kv_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # HF-style rope scaling dict ({"rope_type": "yarn", "factor": ..., ...}) or None
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    # RePo's d_p (width of the position representation); None means d_model // 8, set when the config is built
    d_position: int | None = None
    # position assigned by "nope" layers (RePo App. A: NoPE == RoPE at a constant position)
    nope_position: float = 0.0
    # learned position increments (the learned-increments post): DeltaMLP width (None = d_model // 4) and the
    # per-layer variant's bound on δ
    lpi_hidden: int | None = None
    lpi_max_delta: float = 10.0
    # CoPE's p_max (position embeddings e[0..p_max]); FoX / GRAPE-AP gate bias at initialisation
    cope_max_position: int = 64
    forget_bias_init: float = 3.0
    # a decay added to every layer's scores on top of the rotation, computed once from the token embeddings (the
    # learned-increments post's decay): "none", or a decay of the registry ("alibi", "forget"); the forget gate's
    # hidden width (None = d_model // 4)
    decay: str = "none"
    decay_hidden: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.family not in BLOCK_FAMILIES:
            raise CheckpointError(
                f"unknown block family {self.family!r}; supported: {', '.join(BLOCK_FAMILIES)}"
            )
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.d_position is None:
            self.d_position = self.d_model // 8
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise CheckpointError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    "set head_dim explicitly"
                )
            self.head_dim = self.d_model // self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise CheckpointError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if len(self.layer_mechanisms) != self.n_layers:
            raise CheckpointError(
                f"layer_mechanisms has {len(self.layer_mechanisms)} entries for "
                f"{self.n_layers} layers; give one mechanism per layer"
            )
        self.layer_mechanisms = self._current_kinds(list(self.layer_mechanisms))
        self._check_decay()

    def _current_kinds(self, kinds: list[str]) -> list[str]:
        """``kinds`` under their current names: a kind the registry renamed (its ``formerly`` trait) is read
        as its new name in a config of the block family that wrote the old one, with a DeprecationWarning."""
        current = current_kinds(kinds, family=self.family)
        if current != kinds:
            warnings.warn(renamed_message(kinds, current, f"a model config of block family {self.family!r}"),
                          DeprecationWarning, stacklevel=4)
        return current

    def _check_decay(self) -> None:
        """``decay`` a name (which decays exist, the registry says when the model is built: ``build_decay``);
        ``decay_hidden`` None or a positive integer."""
        if not isinstance(self.decay, str):
            raise CheckpointError(f"decay={self.decay!r}; expected the name of a decay, or 'none'")
        hidden = self.decay_hidden
        if hidden is not None and (isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1):
            raise CheckpointError(f"decay_hidden={hidden!r}; expected a positive integer (the forget gate's hidden "
                                  "width) or None for d_model // 4")

    @property
    def d_head(self) -> int:
        return int(self.head_dim)  # type: ignore[arg-type]

    @property
    def repo_dim(self) -> int | None:
        """Deprecated: RePo's d_p is ``d_position``."""
        warnings.warn("ModelConfig.repo_dim is deprecated and stops working in the next release: use "
                      "ModelConfig.d_position", DeprecationWarning, stacklevel=2)
        return self.d_position

    @property
    def lpi_hidden_dim(self) -> int:
        return self.lpi_hidden if self.lpi_hidden is not None else self.d_model // 4

    @property
    def decay_hidden_dim(self) -> int:
        return self.decay_hidden if self.decay_hidden is not None else self.d_model // 4

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        data = current_config_keys(data)  # configs saved with repo_dim (d_position's former name) load as they are
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CheckpointError(
                f"unknown model config keys {unknown}; known keys: {sorted(names)}"
            )
        return cls(**data)


def _former_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """ModelConfig's constructor, which also takes ``repo_dim`` (``d_position``'s former name) for one release."""

    @functools.wraps(init)
    def __init__(self: ModelConfig, *args: Any, **kwargs: Any) -> None:
        if "repo_dim" in kwargs:
            warnings.warn("ModelConfig(repo_dim=...) is deprecated and stops working in the next release: use "
                          "ModelConfig(d_position=...)", DeprecationWarning, stacklevel=2)
            kwargs = current_config_keys(kwargs, "ModelConfig(...)")
        init(self, *args, **kwargs)

    return __init__


setattr(ModelConfig, "__init__", _former_keywords(ModelConfig.__init__))


def repo_start_layer(n_layers: int) -> int:
    """RePo's default first re-positioned layer, ⌈L/3⌉ (RePo §3.2).

    >>> repo_start_layer(16), repo_start_layer(4)
    (6, 2)
    """
    return math.ceil(n_layers / 3)
