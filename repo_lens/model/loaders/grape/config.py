"""A GRAPE authors' ``config.json`` (their ``GPTConfig``, ``model_type: "gpt2"``) as a ModelConfig.

A key their training script did not pass is absent from the file; their model then reads the class
default of that variant's ``GPTConfig`` (or the ``getattr`` default in its code), and so do we.
"""

from __future__ import annotations

import math
from typing import Any

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig

# layer kind of each variant (GRAPE-M non-contextual rotates by the index t, with learned frequencies; the contextual
# one's sigmoid phase is a kind of its own, grape-m-context, not the zoo's softplus grape-m; GRAPE-AP's potential of
# a rotated projection of the layer input is grape-ap-rotated, not the zoo's grape-ap of q·k)
KINDS = {"llama-mha-rope": "rope", "llama-mha-alibi": "alibi", "llama-mha-fox": "fox",
         "llama-mha-grape-a-keygated": "grape-a", "llama-mha-grape-a-querygated": "grape-a",
         "llama-mha-grape-a-querykeygated": "grape-a", "llama-mha-grape-ap-v1": "grape-ap-rotated",
         "llama-mha-grape-m-ctx": "grape-m-context", "llama-mha-grape-m-nonctx": "rope"}


def is_grape_config(config: dict[str, Any]) -> bool:
    """True for a config.json written by the GRAPE authors' ``GPTConfig`` (not a stock GPT-2 one).

    >>> is_grape_config({"model_type": "gpt2", "n_embd": 64, "n_head": 2, "block_size": 64, "use_qk_rmsnorm": True})
    True
    >>> is_grape_config({"model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_positions": 1024})
    False
    """
    return config.get("model_type") == "gpt2" and "block_size" in config and (
        "use_qk_rmsnorm" in config or config.get("architectures") == ["GPT"])


def _integer(config: dict[str, Any], key: str, default: Any = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"GRAPE config.json: {key}={value!r}; expected a positive integer")
    return value


def _common_options(config: dict[str, Any]) -> dict[str, Any]:
    return {"qk_norm": "head" if config.get("use_qk_rmsnorm", True) else "none", "qk_norm_eps": 1e-5,
            "k_shift": bool(config.get("use_k_shift", False)), "v_shift": bool(config.get("use_v_shift", False)),
            "unshifted_single_token": True, "output_norm": "head" if config.get("using_groupnorm", False) else "none",
            "output_norm_eps": 1e-5, "rope_base": float(config.get("rope_base", 10000.0))}


def _variant_options(variant: str, config: dict[str, Any]) -> dict[str, Any]:
    """The options of ``variant`` beyond the common ones, with their code's defaults."""
    get = config.get
    if variant == "llama-mha-grape-m-nonctx":
        learnable = bool(get("grape_learnable_freq", True))
        return {"learned_frequencies": True, "frequencies_shared": bool(get("grape_share_across_heads", True)),
                "frequency_scale": float(get("grape_log_freq_scale", 16.0)) if learnable else 1.0}
    if variant == "llama-mha-grape-m-ctx":
        scale = get("grape_ctx_omega_scale", 16.0)
        return {"learned_frequencies": True, "frequencies_shared": bool(get("grape_share_across_heads", True)),
                "frequency_scale": 1.0, "grape_ctx_per_head": bool(get("grape_ctx_per_head", False)),
                "grape_ctx_omega_scale": float(get("grape_log_freq_scale", 16.0) if scale is None else scale)}
    if variant.startswith("llama-mha-grape-a-"):
        gating = variant.removeprefix("llama-mha-grape-a-").removesuffix("gated")
        return {"gating": gating, "u_l2_norm": bool(get("keygated_u_l2_norm", True)),
                "u_l2_eps": float(get("keygated_u_l2_eps", 1e-6)), "v_l2_norm": bool(get("querygated_v_l2_norm", True)),
                "v_l2_eps": float(get("querygated_v_l2_eps", 1e-6))}
    if variant == "llama-mha-grape-ap-v1":
        return {"p_tie_mode": str(get("p_tie_mode", "none")), "p_head_dim": get("p_head_dim")}
    if variant == "llama-mha-fox":
        return {"qk_norm_before_rotation": True, "rope": bool(get("use_rope", False)),
                "fgate_type": str(get("fgate_type", "full")),
                "output_gate": str(get("ogate_act", "sigmoid")) if get("use_output_gate", False) else "none"}
    return {}


def _head_dim(variant: str, config: dict[str, Any], n_embd: int, n_head: int) -> int:
    if variant == "llama-mha-fox":  # their ForgettingAttentionLayer: hidden_size // num_heads
        return n_embd // n_head
    head_dim = _integer(config, "head_dim", 128)
    if variant.startswith("llama-mha-grape-m-") and head_dim * n_head != n_embd:
        raise CheckpointError(f"GRAPE-M needs n_head * head_dim == n_embd (their assertion); config.json has "
                              f"{n_head} * {head_dim} != {n_embd}")
    return head_dim


def grape_model_config(config: dict[str, Any], variant: str) -> ModelConfig:
    """The ModelConfig of a GRAPE checkpoint of ``variant`` (options in ``extra["authors"]``)."""
    n_embd, n_head, n_layer = _integer(config, "n_embd"), _integer(config, "n_head"), _integer(config, "n_layer")
    if config.get("num_kv_heads") is not None or config.get("group_size") is not None:
        raise CheckpointError("GRAPE config.json asks for grouped keys (num_kv_heads/group_size); their MHA "
                              "models have none and FoX refuses them (NotImplementedError)")
    options = {**_common_options(config), **_variant_options(variant, config), "variant": variant}
    return ModelConfig(
        family="authors", vocab_size=_integer(config, "vocab_size", 50304), d_model=n_embd, n_layers=n_layer,
        n_heads=n_head, head_dim=_head_dim(variant, config, n_embd, n_head), d_mlp=math.floor(8 / 3 * n_embd),
        layer_mechanisms=[KINDS[variant]] * n_layer, rms_norm_eps=1e-5, rope_theta=options["rope_base"],
        max_position_embeddings=_integer(config, "block_size", 1024), tie_word_embeddings=True,
        extra={"authors": options})
