"""The post's ``model_config`` (its ``SelectivePEModelConfig`` fields, defaults included) read strictly and
turned into a :class:`ModelConfig`: pre-norm RMSNorm blocks (the Llama block), SwiGLU or GELU MLPs without
biases, tied output, no embedding scale, θ from ``rope_theta``; each layer's mechanism from ``pos_encoding`` and the
δ options; its ``decay`` as the model's decay (``alibi``; ``learned``: repo_lens' ``forget``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig

# SelectivePEModelConfig's fields and defaults (experiments/selective_pe/config.py); None: required
FIELDS: dict[str, Any] = {
    "dim": None, "n_heads": None, "n_layers": None, "intermediate_dim": None, "vocab_size": 50257,
    "max_seq_len": 256, "rope_theta": 10000.0, "norm_eps": 1e-5, "dropout": 0.0, "pos_encoding": "rope",
    "norm_type": "rmsnorm", "activation": "swiglu", "init_std": 0.02, "delta_hidden_dim": None,
    "per_layer_delta": False, "per_head_delta": False, "decay": "none",
}
COMPUTED = ("head_dim", "effective_delta_hidden_dim")  # model_dump() writes its computed fields too
POS_ENCODINGS = ("rope", "pope", "selective_rope", "selective_pope")
DECAYS = ("none", "alibi", "learned")
DECAY_NAMES = {"none": "none", "alibi": "alibi", "learned": "forget"}  # its decay -> ModelConfig.decay
NORM_TYPES = ("rmsnorm", "layernorm")
ACTIVATIONS = ("swiglu", "gelu")
MAX_DELTA = 10.0  # DeltaMLP's max_delta: its per-layer δ is bounded by it (not part of the config)


@dataclass(frozen=True)
class PostVariant:
    """What a checkpoint's config (and its frozen δ table, if any) asks for."""

    pos_encoding: str
    per_layer: bool
    per_head: bool
    decay: str
    frozen: str | None  # None, "shared" ([V] table) or "per_head" ([V, H] table)

    @property
    def name(self) -> str:
        parts = [self.pos_encoding]
        if self.pos_encoding.startswith("selective"):
            parts.append("frozen δ table" + (" per head" if self.frozen == "per_head" else "") if self.frozen
                         else ("per-layer" if self.per_layer else "shared") + (" per-head" if self.per_head else "") + " δ")
        if self.decay != "none":
            parts.append(f"decay={self.decay}")
        return ", ".join(parts)


def read_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The config's fields, defaults filled in as its pydantic model fills them; unknown fields, missing
    required ones, wrong types and unknown values are refused by name."""
    unknown = sorted(str(key) for key in config if key not in FIELDS and key not in COMPUTED)
    if unknown:
        raise CheckpointError(f"model_config has unknown fields {unknown}; the post's SelectivePEModelConfig has "
                              f"{sorted(FIELDS)} (and the computed {list(COMPUTED)})")
    missing = sorted(key for key, default in FIELDS.items() if default is None and config.get(key) is None
                     and key != "delta_hidden_dim")
    if missing:
        raise CheckpointError(f"model_config lacks the required fields {missing}")
    fields = {key: config.get(key, default) for key, default in FIELDS.items()}
    for key in ("dim", "n_heads", "n_layers", "intermediate_dim", "vocab_size", "max_seq_len"):
        _positive_int(fields, key)
    if fields["delta_hidden_dim"] is not None:
        _positive_int(fields, "delta_hidden_dim")
    for key in ("rope_theta", "norm_eps"):
        value = fields[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
            raise CheckpointError(f"model_config field {key}={value!r}; expected a positive number")
    for key in ("per_layer_delta", "per_head_delta"):
        if not isinstance(fields[key], bool):
            raise CheckpointError(f"model_config field {key}={fields[key]!r}; expected true or false")
    for key, allowed in (("pos_encoding", POS_ENCODINGS), ("decay", DECAYS), ("norm_type", NORM_TYPES),
                         ("activation", ACTIVATIONS)):
        if fields[key] not in allowed:
            raise CheckpointError(f"model_config field {key}={fields[key]!r} is not one the post's code knows; "
                                  f"expected one of {list(allowed)}")
    if fields["dim"] % fields["n_heads"] or (fields["dim"] // fields["n_heads"]) % 2:
        raise CheckpointError(f"model_config: dim={fields['dim']} must split into n_heads={fields['n_heads']} heads "
                              "of an even width (the post's config validator)")
    hidden = fields["delta_hidden_dim"] or fields["dim"] // 4
    for key, value in (("head_dim", fields["dim"] // fields["n_heads"]), ("effective_delta_hidden_dim", hidden)):
        if key in config and config[key] != value:
            raise CheckpointError(f"model_config field {key}={config[key]!r} disagrees with the fields it is computed "
                                  f"from ({value})")
    return fields


def _positive_int(fields: dict[str, Any], key: str) -> None:
    value = fields[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"model_config field {key}={value!r}; expected a positive integer")


def layer_kind(variant: PostVariant) -> str:
    """The registry kind that runs every layer of ``variant`` exactly (its decay is the model's, not the layers')."""
    pope = "-pope" if variant.pos_encoding.endswith("pope") else ""
    if not variant.pos_encoding.startswith("selective"):
        return "pope" if pope else "rope"
    if variant.frozen is not None:
        return "lpi-table" + pope
    if variant.per_layer:
        return ("lpi-resid-head" if variant.per_head else "lpi-resid") + pope
    return ("lpi-head" if variant.per_head else "lpi") + pope


def model_config(fields: dict[str, Any], variant: PostVariant) -> ModelConfig:
    """The ModelConfig that runs the post's model of ``fields``."""
    if fields["norm_type"] != "rmsnorm":
        raise CheckpointError("model_config field norm_type='layernorm': repo_lens runs the post's RMSNorm models "
                              "(norm_type='rmsnorm', what its training uses); LayerNorm blocks are not supported")
    kind = layer_kind(variant)
    return ModelConfig(
        family="llama", vocab_size=fields["vocab_size"], d_model=fields["dim"], n_layers=fields["n_layers"],
        n_heads=fields["n_heads"], d_mlp=fields["intermediate_dim"], rms_norm_eps=float(fields["norm_eps"]),
        rope_theta=float(fields["rope_theta"]), max_position_embeddings=fields["max_seq_len"],
        tie_word_embeddings=True, lpi_hidden=fields["delta_hidden_dim"] or fields["dim"] // 4,
        lpi_max_delta=MAX_DELTA, layer_mechanisms=[kind] * fields["n_layers"], extra={"mlp": fields["activation"]},
        decay=DECAY_NAMES[variant.decay], decay_hidden=fields["delta_hidden_dim"] or fields["dim"] // 4,
    )
