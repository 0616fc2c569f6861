"""Checkpoints laid out exactly as the FoX authors' package writes them (github
zhixuan-lin/forgetting-transformer: ``ForgettingTransformerForCausalLM.save_pretrained``, as their
save_model.py calls it, transformers 4.x): config.json (their ForgettingTransformerConfig's fields,
sorted, model_type "forgetting_transformer-project_fox"), generation_config.json and model.safetensors
with their weight names (a tied lm_head is left out, as safetensors saving does)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

# ForgettingTransformerConfig's defaults (configs/model/forgetting_transformer.py passes these)
DEFAULTS = {"attention_bias": False, "bos_token_id": None, "decay_time_max": None, "decay_time_min": None,
            "elementwise_affine": True, "eos_token_id": None, "fgate_bias_init": False, "fgate_type": "full",
            "fuse_cross_entropy": True, "fuse_norm": True, "hidden_act": "swish", "hidden_ratio": 4, "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": None, "log_pruning_tolerance": None,
            "max_position_embeddings": None, "norm_eps": 1e-06, "num_heads": 4, "num_hidden_layers": 2,
            "num_kv_heads": None, "ogate_act": "sigmoid", "qk_norm": False, "qk_norm_share_param_across_head": False,
            "rope_base": 500000.0, "tie_word_embeddings": False, "use_cache": True, "use_k_shift": False,
            "use_output_gate": False, "use_output_norm": False, "use_rope": False, "use_v_shift": False,
            "vocab_size": 97, "window_size": None}
# their experiment configs' FoX (LLaMA) and FoX (Pro), and every other option of the layer
CASES = {
    "llama": {},
    "pro": dict(use_v_shift=True, use_k_shift=True, qk_norm=True, use_output_gate=True, use_output_norm=True, hidden_ratio=3.5),
    "pro-shared-qknorm": dict(use_v_shift=True, use_k_shift=True, qk_norm=True, qk_norm_share_param_across_head=True,
                              use_output_gate=True, use_output_norm=True, hidden_ratio=3.5),
    "rope": dict(use_rope=True),
    "bias-only": dict(fgate_type="bias_only", fgate_bias_init=True, decay_time_min=2.0, decay_time_max=64.0),
    "fixed": dict(fgate_type="fixed", fgate_bias_init=True, decay_time_min=2.0, decay_time_max=64.0),
    "transformer-rope": dict(fgate_type="none", use_rope=True, rope_base=10000.0),
    "ogate-silu": dict(use_output_gate=True, ogate_act="silu", norm_eps=1e-05),
    "sigmoid-mlp-tied": dict(hidden_act="sigmoid", tie_word_embeddings=True, intermediate_size=96),
    "pruning": dict(log_pruning_tolerance=-10.0, qk_norm=True),
}


def config(name: str) -> dict:
    return {**DEFAULTS, **CASES[name], "architectures": ["ForgettingTransformerForCausalLM"],
            "model_type": "forgetting_transformer-project_fox", "torch_dtype": "float32", "transformers_version": "4.46.3"}


def _mlp_width(cfg: dict) -> int:
    if cfg["intermediate_size"]:
        return cfg["intermediate_size"]
    width = int(cfg["hidden_size"] * cfg["hidden_ratio"] * 2 / 3)
    return 256 * ((width + 255) // 256)


def _attention(sd: dict, prefix: str, cfg: dict) -> None:
    C, H = cfg["hidden_size"], cfg["num_heads"]
    sd[prefix + "q_proj.weight"] = torch.empty(C, C)
    for name, shifted in (("k_proj", cfg["use_k_shift"]), ("v_proj", cfg["use_v_shift"])):
        if shifted:
            sd[f"{prefix}{name}.linear.weight"], sd[f"{prefix}{name}.shift_proj.weight"] = torch.empty(C, C), torch.empty(H, C)
        else:
            sd[f"{prefix}{name}.weight"] = torch.empty(C, C)
    sd[prefix + "o_proj.weight"] = torch.empty(C, C)
    if cfg["fgate_type"] == "full":
        sd[prefix + "fgate_proj.weight"], sd[prefix + "fgate_proj.bias"] = torch.empty(H, C), torch.empty(H)
    elif cfg["fgate_type"] != "none":
        sd[prefix + "fgate_bias"] = torch.empty(H)  # a parameter (bias_only) or a persistent buffer (fixed)
    if cfg["use_output_gate"]:
        sd[prefix + "ogate_proj.weight"] = torch.empty(C, C)
    if cfg["use_output_norm"]:
        sd[prefix + "output_norm.weight"] = torch.empty(C)
    if cfg["qk_norm"]:
        D = C // H if cfg["qk_norm_share_param_across_head"] else C
        sd[prefix + "q_norm.weight"], sd[prefix + "k_norm.weight"] = torch.empty(D), torch.empty(D)


def state_dict_layout(cfg: dict) -> dict[str, torch.Tensor]:
    C, V, F = cfg["hidden_size"], cfg["vocab_size"], _mlp_width(cfg)
    sd = {"model.embeddings.weight": torch.empty(V, C)}
    for layer in range(cfg["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        sd[prefix + "attn_norm.weight"] = torch.empty(C)
        _attention(sd, prefix + "attn.", cfg)
        sd[prefix + "mlp_norm.weight"] = torch.empty(C)
        sd[prefix + "mlp.gate_proj.weight"], sd[prefix + "mlp.down_proj.weight"] = torch.empty(2 * F, C), torch.empty(C, F)
    sd["model.norm.weight"] = torch.empty(C)
    if not cfg["tie_word_embeddings"]:
        sd["lm_head.weight"] = torch.empty(V, C)
    return sd


def write_fox_checkpoint(directory: Path, name: str, seed: int = 0) -> tuple[dict, dict[str, torch.Tensor]]:
    """Write a tiny random checkpoint of case ``name``; returns (its config, its weights)."""
    cfg = config(name)
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for key, tensor in state_dict_layout(cfg).items():
        noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
        scale = 0.3 if tensor.dim() == 1 else 1.0 / tensor.shape[-1] ** 0.5
        weights[key] = (noise * scale + (1.0 if "norm" in key else 0.0)).float()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (directory / "generation_config.json").write_text(json.dumps({"_from_model_config": True,
                                                                  "transformers_version": "4.46.3"}, indent=2) + "\n")
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return cfg, weights
