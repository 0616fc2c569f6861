"""Read a Hugging Face config.json (stock OLMo-2 / Llama, or the published RePo layout)."""

from __future__ import annotations

from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig

SUPPORTED_MODEL_TYPES = ("olmo2", "llama")
# dynamic_pe_mode values of the authors' code that repo_lens implements, and the mechanism each means
SUPPORTED_PE_MODES = {"swigluex_multihead": "repo"}


def _first_key(mapping: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if name in mapping:
            return mapping[name]
    return default


def _parse_layer_ids(value: Any, n_layers: int) -> list[int]:
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        items = [item for item in value.replace(";", ",").replace(" ", ",").split(",") if item]
    else:
        items = list(value)
    try:
        layers = sorted({int(item) for item in items})
    except (TypeError, ValueError):
        raise CheckpointError(
            f"pe_config layer ids {value!r} are not integers; write them as '5,6,7' or [5, 6, 7]"
        ) from None
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise CheckpointError(f"pe_config names layers {bad}, but the model has layers 0..{n_layers - 1}")
    return layers


def repo_layers_from_pe_config(pe_config: dict[str, Any] | None, n_layers: int) -> list[int]:
    """Layers that re-position, read like the authors' code: the misspelled ``dynmaic_*`` keys
    first, then the correct spelling; empty layer ids mean every layer from the start layer on.

    >>> repo_layers_from_pe_config({"dynamic_pe_mode": "swigluex_multihead",
    ...     "dynmaic_pe_start_layer": 5, "dynmaic_pe_layer_ids": ""}, n_layers=8)
    [5, 6, 7]
    """
    if not pe_config:
        return []
    mode = pe_config.get("dynamic_pe_mode")
    if mode in (None, "", "none"):
        return []
    if mode not in SUPPORTED_PE_MODES:
        raise CheckpointError(
            f"unknown dynamic_pe_mode {mode!r} in pe_config; supported: {', '.join(SUPPORTED_PE_MODES)}"
        )
    explicit = _parse_layer_ids(_first_key(pe_config, "dynmaic_pe_layer_ids", "dynamic_pe_layer_ids"), n_layers)
    if explicit:
        return explicit
    start = _first_key(pe_config, "dynmaic_pe_start_layer", "dynamic_pe_start_layer")
    if start is None:
        raise CheckpointError(
            "pe_config enables RePo but gives neither dynmaic_pe_start_layer nor dynmaic_pe_layer_ids; "
            "add one so the re-positioned layers are known"
        )
    start = int(start)
    if not 0 <= start < n_layers:
        raise CheckpointError(f"pe_config start layer {start} is outside the model's layers 0..{n_layers - 1}")
    return list(range(start, n_layers))


def _rope_settings(config: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from transformers 4.x (rope_theta + rope_scaling) or 5.x (rope_parameters)."""
    parameters = config.get("rope_parameters")
    if isinstance(parameters, dict) and parameters:
        theta = float(parameters.get("rope_theta", config.get("rope_theta", 10000.0)))
        rope_type = parameters.get("rope_type", parameters.get("type", "default"))
        return theta, None if rope_type == "default" else dict(parameters)
    scaling = config.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return float(config.get("rope_theta", 10000.0)), scaling


def model_config_from_hf(config: dict[str, Any]) -> ModelConfig:
    """Translate an HF config dict (OLMo-2 or Llama, optionally with RePo's pe_config)."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"model_type {model_type!r} has no repo_lens adapter; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise CheckpointError(f"hidden_act {activation!r} is not supported; repo_lens' SwiGLU uses 'silu'")
    try:
        n_layers = int(config["num_hidden_layers"])
        n_heads = int(config["num_attention_heads"])
        d_model = int(config["hidden_size"])
        d_mlp = int(config["intermediate_size"])
        vocab_size = int(config["vocab_size"])
    except KeyError as missing:
        raise CheckpointError(f"config.json lacks {missing}; it is not a complete {model_type} config") from None
    repo_layers = set(repo_layers_from_pe_config(config.get("pe_config"), n_layers))
    theta, scaling = _rope_settings(config)
    return ModelConfig(
        family=model_type,
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=int(config.get("num_key_value_heads") or n_heads),
        head_dim=config.get("head_dim"),
        d_mlp=d_mlp,
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias", False)),
        mlp_bias=bool(config.get("mlp_bias", False)),
        layer_mechanisms=["repo" if layer in repo_layers else "rope" for layer in range(n_layers)],
    )
