"""Read a Hugging Face config.json (stock OLMo-2 / Llama, or the published RePo layout)."""

from __future__ import annotations

import warnings
from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig
from repo_lens.model.loaders.repo_authors.pe_config import PeLayout, read_pe_config
from repo_lens.model.loaders.schema import check_hf_config

SUPPORTED_MODEL_TYPES = ("olmo2", "llama")
# the mechanism of every layer of a stock HF OLMo-2 / Llama checkpoint (and of a RePo one below its start layer)
HF_BASE_MECHANISM = "rope"


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
    """Translate an HF config dict (OLMo-2 or Llama, optionally with RePo's pe_config, read as the
    authors' code reads it: :func:`repo_lens.model.loaders.repo_authors.pe_config.read_pe_config`; its notes are
    warned and kept in ``extra["pe_config_notes"]``).

    >>> cfg = model_config_from_hf({"model_type": "olmo2", "num_hidden_layers": 4, "num_attention_heads": 4,
    ...     "hidden_size": 64, "intermediate_size": 96, "vocab_size": 64,
    ...     "pe_config": {"dynamic_pe_mode": "nope", "dynmaic_pe_start_layer": 3}})
    >>> cfg.layer_mechanisms, cfg.extra
    (['rope', 'rope', 'rope', 'nope'], {})
    """
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"model_type {model_type!r} has no repo_lens adapter; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise CheckpointError(f"hidden_act {activation!r} is not supported; repo_lens' SwiGLU uses 'silu'")
    check_hf_config(config)
    n_layers, n_heads = config["num_hidden_layers"], config["num_attention_heads"]
    d_model, d_mlp, vocab_size = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    layout = read_pe_config(config.get("pe_config"), n_layers, d_model, n_heads, HF_BASE_MECHANISM)
    for note in layout.notes:
        warnings.warn(note, stacklevel=3)
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
        layer_mechanisms=layout.layer_mechanisms,
        extra=_pe_extra(layout),
    )


def _pe_extra(layout: PeLayout) -> dict[str, Any]:
    """What ModelConfig.extra keeps of the pe_config reading (the loader and the load's meta use it)."""
    extra: dict[str, Any] = {}
    if layout.notes:
        extra["pe_config_notes"] = list(layout.notes)
    if layout.unread_weights:
        extra["unread_weights"] = {name: list(shape) for name, shape in layout.unread_weights.items()}
    return extra
