"""A FoX package ``config.json`` (``ForgettingTransformerConfig``, ``model_type:
"forgetting_transformer-project_fox"``, github ``zhixuan-lin/forgetting-transformer``) as a ModelConfig
of the authors' block family."""

from __future__ import annotations

from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig

MODEL_TYPE = "forgetting_transformer-project_fox"
UNBOUNDED_CONTEXT = 1 << 17  # their config may leave max_position_embeddings unset: FoX has no length limit


def _positive(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"FoX config.json: {key}={value!r}; expected a positive integer")
    return value


def intermediate_size(config: dict[str, Any], hidden: int) -> int:
    """Their MLP width: ``intermediate_size``, else 2/3·hidden_ratio·hidden rounded up to a multiple of 256.

    >>> intermediate_size({"hidden_ratio": 3.5}, 64)
    256
    """
    if config.get("intermediate_size"):
        return int(config["intermediate_size"])
    width = int(hidden * (config.get("hidden_ratio") or 4) * 2 / 3)
    return 256 * ((width + 256 - 1) // 256)


def _refuse_unsupported(config: dict[str, Any]) -> None:
    """What their own code refuses (GQA, silu gates with the output norm) or does not define."""
    if config.get("num_kv_heads") is not None:
        raise CheckpointError("FoX config.json sets num_kv_heads; their ForgettingAttentionLayer raises "
                              "NotImplementedError('GQA has not been tested.')")
    if config.get("use_output_norm") and config.get("use_output_gate") and config.get("ogate_act", "sigmoid") != "sigmoid":
        raise CheckpointError("FoX config.json combines use_output_norm with ogate_act='silu'; their forward asserts "
                              "ogate_act == 'sigmoid' there")
    if config.get("hidden_act", "swish") not in ("swish", "sigmoid"):
        raise CheckpointError(f"FoX config.json hidden_act={config.get('hidden_act')!r}; their MLP takes 'swish' or 'sigmoid'")


def _options(config: dict[str, Any]) -> dict[str, Any]:
    qk = "none" if not config.get("qk_norm") else "head" if config.get("qk_norm_share_param_across_head") else "group"
    gate = str(config.get("ogate_act", "sigmoid")) if config.get("use_output_gate") else "none"
    return {"qk_norm": qk, "qk_norm_eps": 1e-5, "qk_norm_before_rotation": True,
            "k_shift": bool(config.get("use_k_shift")), "v_shift": bool(config.get("use_v_shift")),
            "unshifted_single_token": False, "rope": bool(config.get("use_rope")),
            "rope_base": float(config.get("rope_base", 500000.0)), "neox_rotation": True,
            "output_norm": "group" if config.get("use_output_norm") else "none",
            "output_norm_eps": float(config.get("norm_eps", 1e-6)), "output_gate": gate,
            "fgate_type": str(config.get("fgate_type", "full")), "mlp_act": str(config.get("hidden_act", "swish")),
            "log_pruning_tolerance": config.get("log_pruning_tolerance")}


def fox_model_config(config: dict[str, Any]) -> ModelConfig:
    """The ModelConfig of a FoX package checkpoint (its options in ``extra["authors"]``)."""
    _refuse_unsupported(config)
    hidden, heads, layers = _positive(config, "hidden_size"), _positive(config, "num_heads"), _positive(config, "num_hidden_layers")
    if hidden % heads:
        raise CheckpointError(f"FoX config.json: hidden_size={hidden} is not divisible by num_heads={heads}")
    options = _options(config)
    kind = "fox" if options["fgate_type"] != "none" else "rope" if options["rope"] else "nope"
    context = config.get("max_position_embeddings")
    return ModelConfig(
        family="authors", vocab_size=_positive(config, "vocab_size"), d_model=hidden, n_layers=layers, n_heads=heads,
        d_mlp=intermediate_size(config, hidden), layer_mechanisms=[kind] * layers,
        rms_norm_eps=float(config.get("norm_eps", 1e-6)), rope_theta=options["rope_base"],
        max_position_embeddings=int(context) if isinstance(context, int) and context > 0 else UNBOUNDED_CONTEXT,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)), extra={"authors": options})
