"""Load a checkpoint saved by the FoX authors' package (github ``zhixuan-lin/forgetting-transformer``:
``ForgettingTransformerForCausalLM.save_pretrained``, as their ``save_model.py`` writes it): config.json,
model.safetensors (or pytorch_model.bin, read by the restricted unpickler) and tokenizer files. Every
option of their ``ForgettingAttentionLayer`` is run by :class:`repo_lens.model.authors.attention.AuthorsAttention`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from repo_lens.model.loaders.fox.config import MODEL_TYPE, fox_model_config
from repo_lens.model.loaders.loaded import LoadedModel, build_strict, dtype_name
from repo_lens.model.loaders.hf.pickled_weights import bin_files, read_bin_weights
from repo_lens.model.loaders.renames import compile_rules, rename_by_rules
from repo_lens.model.loaders.hf.shards import read_safetensors, weight_files
from repo_lens.model.loaders.hf.tokenizer import load_tokenizer, tokenizer_files

CODE = "github zhixuan-lin/forgetting-transformer"
_L = r"model\.layers\.(\d+)\."
_RULES = compile_rules((
    (r"model\.embeddings\.", "embed."), (r"lm_head\.", "unembed."), (r"model\.norm\.", "final_norm."),
    (_L + r"attn_norm\.", r"blocks.\1.input_layernorm."), (_L + r"mlp_norm\.", r"blocks.\1.post_attention_layernorm."),
    (_L + r"attn\.output_norm\.", r"blocks.\1.attn.out_norm."), (_L + r"attn\.fgate_", r"blocks.\1.attn.mechanism.fgate_"),
    (_L + r"attn\.", r"blocks.\1.attn."), (_L + r"mlp\.", r"blocks.\1.mlp."),
))


def is_fox_config(config: dict[str, Any]) -> bool:
    return config.get("model_type") == MODEL_TYPE


def fox_to_lens_name(name: str) -> str:
    """Our module path of a FoX package weight name (unknown names unchanged).

    >>> fox_to_lens_name("model.layers.2.attn.fgate_proj.weight")
    'blocks.2.attn.mechanism.fgate_proj.weight'
    """
    return rename_by_rules(name, _RULES)


def _lens_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Their weights under our names; each fused ``mlp.gate_proj`` [2I, d] split into gate and up (their
    MLP chunks it so: gate first)."""
    out = {}
    for name, tensor in tensors.items():
        ours = fox_to_lens_name(name)
        if ours.endswith(".mlp.gate_proj.weight"):
            gate, up = tensor.chunk(2, dim=0)
            out[ours], out[ours.replace("gate_proj", "up_proj")] = gate, up
        else:
            out[ours] = tensor
    return out


def fox_files(directory: Path) -> list[Path]:
    weights = weight_files(directory) if list(directory.glob("*.safetensors")) else bin_files(directory)
    return [directory / "config.json", *weights, *tokenizer_files(directory)]


def load_fox(directory: Path, config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """The LoadedModel of the FoX package checkpoint in ``directory``."""
    tensors = read_safetensors(directory) if list(directory.glob("*.safetensors")) else read_bin_weights(directory)
    model_config = fox_model_config(config)
    model = build_strict(model_config, _lens_tensors(tensors), rename=str, dtype=dtype, device=device)
    options = model_config.extra["authors"]
    notes = ["q and k are RMS-normalised per head before the rotation (use_rope rotates by +angle, rotate_half)",
             "FoX's bias Σ_{l=j+1}^{i} log f_l is published as positions Σ_{s≤t} −log f_s (hook_pos) and −log f "
             "(hook_delta); with fgate_type 'none' the layer is plain softmax attention"]
    if options.get("log_pruning_tolerance") is not None:
        notes.append("log_pruning_tolerance: their kernel skips blocks whose bias falls below a threshold; repo_lens "
                     "computes every block (their kernel's own reference does the same)")
    meta: dict[str, Any] = {"source": str(directory.resolve()), "format": "fox", "name": config.get("_name_or_path") or directory.name,
            "dtype": dtype_name(dtype), "device": str(device), "pe_config": None, "pe_config_notes": [], "info": {},
            "authors": {"code": CODE, "variant": f"fgate_type={options['fgate_type']}", "options": options, "notes": notes}}
    return LoadedModel(model=model, tokenizer=load_tokenizer(directory), meta=meta)
