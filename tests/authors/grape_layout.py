"""Checkpoints laid out exactly as the GRAPE authors' code writes them (github model-architectures/GRAPE):
their training script builds ``model_args`` (train_adam_finewebedu.py), passes the ``grape_*`` /
``keygated_*`` / ``querygated_*`` / ``querykeygated_*`` globals of a config file by substring of
``model_type``, and ``GPT.save_pretrained`` writes ``config.json`` (their GPTConfig through transformers
4.x: sorted keys, ``model_type: "gpt2"``, ``architectures: ["GPT"]``) and ``pytorch_model.bin`` (torch.save
of the state_dict, the tied ``transformer.wte.weight`` and ``lm_head.weight`` both present, one storage).

The 30 configurations are their ``config/train_llama_mha_*_adam_80g8.py`` files at tiny sizes: "M"
(medium: 8 heads, a power of two) and "L" (large: 10 heads, not one) shrunk to 4 and 5 heads of 16
channels (GRAPE-AP keeps their p_head_dim = 8).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

# (variant, the sizes it has configs for); each with and without kv-shift: 30 configurations
VARIANTS = (("rope", "ML"), ("alibi", "ML"), ("fox", "ML"), ("grape-a-keygated", "M"), ("grape-a-querygated", "M"),
            ("grape-a-querykeygated", "M"), ("grape-ap-v1", "ML"), ("grape-m-ctx", "ML"), ("grape-m-nonctx", "ML"))
CONFIGURATIONS = [(variant, size, shift) for variant, sizes in VARIANTS for size in sizes for shift in (False, True)]
SIZES = {"M": dict(n_layer=2, n_head=4, n_embd=64, head_dim=16), "L": dict(n_layer=3, n_head=5, n_embd=80, head_dim=16)}
# the variant-specific globals their config files set (config/train_llama_mha_<variant>_*.py)
CONFIG_GLOBALS = {
    "grape-m-ctx": dict(grape_base=10000.0, grape_learnable_freq=True, grape_share_across_heads=True,
                        grape_ctx_per_head=False, grape_ctx_init_omega=1e-3),
    "grape-m-nonctx": dict(grape_base=10000.0, grape_learnable_freq=True, grape_share_across_heads=True),
    "grape-a-keygated": dict(keygated_omega_init=None, keygated_u_l2_norm=True, keygated_u_l2_eps=1e-6),
    "grape-a-querygated": dict(querygated_omega_init=None, querygated_v_l2_norm=True, querygated_v_l2_eps=1e-6),
    "grape-a-querykeygated": dict(querykeygated_omega_init=None, keygated_u_l2_norm=True, keygated_u_l2_eps=1e-6,
                                  querygated_v_l2_norm=True, querygated_v_l2_eps=1e-6),
    "grape-ap-v1": dict(p_tie_mode="none", p_head_dim=8),
}


def model_args(variant: str, size: str, shift: bool, vocab_size: int = 97, **overrides) -> dict:
    """The keyword arguments their training script gives GPTConfig for this configuration."""
    model_type = "llama-mha-" + variant
    options = CONFIG_GLOBALS.get(variant, {})
    args = {"n_layer": 0, "n_head": 0, "n_embd": 0, "block_size": 64, "bias": False, "head_dim": 0, "tpa_kvrank": 2,
            "tpa_qrank": 16, "using_groupnorm": False, "vocab_size": vocab_size, "dropout": 0.0,
            "scale_attn_by_inverse_layer_idx": True, "embedding_init_std": 0.02, "hidden_init_std_factor": 0.5,
            "use_qk_rmsnorm": True, "use_k_shift": shift, "use_v_shift": shift,
            "p_tie_mode": options.get("p_tie_mode", "none"), "p_head_dim": options.get("p_head_dim")}
    args.update(SIZES[size])
    for prefix, applies in (("grape_", "grape" in model_type), ("keygated_", "keygated" in model_type),
                            ("querygated_", "querygated" in model_type or "querykeygated" in model_type),
                            ("querykeygated_", "querykeygated" in model_type)):
        args.update({key: value for key, value in options.items() if key.startswith(prefix) and applies})
    args.update(overrides)
    return args


def config_json(args: dict) -> str:
    """config.json as GPTConfig.save_pretrained writes it (transformers 4.46.3)."""
    data = {**args, "architectures": ["GPT"], "model_type": "gpt2", "torch_dtype": "float32",
            "transformers_version": "4.46.3"}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _projection(sd: dict, prefix: str, rows: int, cols: int, shifted: bool, n_head: int) -> None:
    if shifted:
        sd[prefix + ".linear.weight"] = torch.empty(rows, cols)
        sd[prefix + ".shift_proj.weight"] = torch.empty(n_head, cols)
    else:
        sd[prefix + ".weight"] = torch.empty(rows, cols)


def _attention_shapes(sd: dict, prefix: str, variant: str, args: dict) -> None:
    """The attention weights of one layer, in their modules' registration order."""
    C, H, D = args["n_embd"], args["n_head"], args["head_dim"]
    shift = args["use_k_shift"]
    if variant == "fox":
        D, core = C // H, prefix + ".core"
        sd[core + ".q_proj.weight"] = torch.empty(C, C)
        _projection(sd, core + ".k_proj", C, C, shift, H)
        _projection(sd, core + ".v_proj", C, C, shift, H)
        sd[core + ".c_proj.weight"] = torch.empty(C, C)
        sd[core + ".fgate_proj.weight"], sd[core + ".fgate_proj.bias"] = torch.empty(H, C), torch.empty(H)
        sd[core + ".q_norm.weight"], sd[core + ".k_norm.weight"] = torch.empty(D), torch.empty(D)
        return
    sd[prefix + ".c_q.weight"] = torch.empty(H * D, C)
    _projection(sd, prefix + ".c_k", H * D, C, shift, H)
    _projection(sd, prefix + ".c_v", H * D, C, shift, H)
    if variant == "grape-ap-v1":
        sd[prefix + ".c_p.weight"] = torch.empty(H * args["p_head_dim"], C)
    sd[prefix + ".c_proj.weight"] = torch.empty(C, H * D)
    if variant.startswith("grape-m-"):
        sd[prefix + ".grape.log_freq"] = torch.empty(D // 2)
    if variant == "grape-m-ctx":
        sd[prefix + ".omega_proj.weight"], sd[prefix + ".omega_proj.bias"] = torch.empty(1, C), torch.empty(1)
    if variant.startswith("grape-a-"):
        gated = prefix + "." + variant.removeprefix("grape-a-") + "_bias"
        sd[gated + ".omega"] = torch.empty(H)
        for vector in {"keygated": "u", "querygated": "v", "querykeygated": "uv"}[variant.removeprefix("grape-a-")]:
            sd[gated + "." + vector] = torch.empty(H, D)
    sd[prefix + ".q_rms.weight"], sd[prefix + ".k_rms.weight"] = torch.empty(D), torch.empty(D)


def state_dict_layout(variant: str, args: dict) -> dict[str, torch.Tensor]:
    """Every tensor their GPT's state_dict holds for this configuration (uninitialised, their order)."""
    C, F = args["n_embd"], math.floor(8 / 3 * args["n_embd"])
    sd = {"transformer.wte.weight": torch.empty(args["vocab_size"], C)}
    for layer in range(args["n_layer"]):
        block = f"transformer.h.{layer}"
        _attention_shapes(sd, block + ".attn", variant, args)
        sd[block + ".mlp.c_fc1.weight"], sd[block + ".mlp.c_fc2.weight"] = torch.empty(F, C), torch.empty(F, C)
        sd[block + ".mlp.c_proj.weight"] = torch.empty(C, F)
        sd[block + ".ln_1.weight"], sd[block + ".ln_2.weight"] = torch.empty(C), torch.empty(C)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied: one storage, both names saved
    sd["ln_f.weight"] = torch.empty(C)
    return sd


def randomised(sd: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """The layout filled with random weights (norm weights around 1), ties kept."""
    generator = torch.Generator().manual_seed(seed)
    filled: dict[int, torch.Tensor] = {}
    out = {}
    for name, tensor in sd.items():
        if id(tensor) not in filled:
            noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
            norm = tensor.dim() == 1 and any(part in name for part in ("rms", "ln_", "norm"))
            value = 1.0 + 0.3 * noise if norm else (noise / tensor.shape[-1] ** 0.5 if tensor.dim() > 1 else 0.5 * noise)
            filled[id(tensor)] = value.float()
        out[name] = filled[id(tensor)]
    return out


def write_grape_checkpoint(directory: Path, variant: str, size: str = "M", shift: bool = False, seed: int = 0,
                           **overrides) -> dict[str, torch.Tensor]:
    """Write a tiny random checkpoint of this configuration as their save_pretrained does; returns its weights."""
    args = model_args(variant, size, shift, **overrides)
    weights = randomised(state_dict_layout(variant, args), seed)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(config_json(args))
    torch.save(weights, directory / "pytorch_model.bin")
    return weights


def run_name(variant: str, size: str, shift: bool) -> str:
    """Their training script's output folder: out_{model_type}_{params}m_Opt_..."""
    return f"out_llama-mha-{variant}_{size}{'_kvshift' if shift else ''}_0m_Opt_adamw"
