"""Load a checkpoint written by the GRAPE authors' training script (github ``model-architectures/GRAPE``):
``config.json`` (their ``GPTConfig``, ``model_type: "gpt2"``) and ``pytorch_model.bin`` from their
``save_pretrained``, for every model file ``model/llama-mha-*.py`` and the options its configs set.

The weights are read by the restricted unpickler, matched strictly (every weight used, none missing)
and run by :class:`repo_lens.model.authors.attention.AuthorsAttention` exactly as their forward runs
them; ``meta["authors"]`` records the variant, its options and where their code departs from the paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.config import ModelConfig
from repo_lens.model.loaders.grape.config import grape_model_config
from repo_lens.model.loaders.grape.names import grape_to_lens_name, lens_to_grape_name
from repo_lens.model.loaders.grape.notes import variant_notes
from repo_lens.model.loaders.grape.variant import grape_variant
from repo_lens.model.loaders.loaded import LoadedModel, build_strict, dtype_name
from repo_lens.model.loaders.hf.pickled_weights import bin_files, read_bin_weights
from repo_lens.model.loaders.hf.tokenizer import load_tokenizer, tokenizer_files
from repo_lens.model.transformer import LensModel

CODE = "github model-architectures/GRAPE"


def grape_files(directory: Path) -> list[Path]:
    """The files a GRAPE load opens: config.json, the pickled weights, tokenizer files if any."""
    return [directory / "config.json", *bin_files(directory), *tokenizer_files(directory)]


def load_grape(directory: Path, config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """The LoadedModel of the GRAPE checkpoint in ``directory`` (its ``config``: config.json)."""
    tensors = read_bin_weights(directory)
    variant = grape_variant(directory, tensors)
    model_config = grape_model_config(config, variant)
    check_weight_names(model_config, tensors, variant)
    model = build_strict(model_config, tensors, rename=grape_to_lens_name, dtype=dtype, device=device)
    options = {key: value for key, value in model_config.extra["authors"].items() if key != "variant"}
    meta: dict[str, Any] = {
        "source": str(directory.resolve()), "format": "grape",
        "name": f"{directory.parent.name}/{directory.name}" if directory.name.startswith("checkpoint-") else directory.name,
        "dtype": dtype_name(dtype), "device": str(device), "pe_config": None, "pe_config_notes": [], "info": {},
        "authors": {"code": CODE, "variant": variant, "options": options, "notes": variant_notes(variant, options)},
    }
    return LoadedModel(model=model, tokenizer=load_tokenizer(directory), meta=meta)


def check_weight_names(model_config: ModelConfig, tensors: dict[str, torch.Tensor], variant: str) -> None:
    """Refuse weights the variant's model lacks or has in surplus, naming them as their files do."""
    with torch.device("meta"):
        expected = {name for name, _ in LensModel(model_config).named_parameters()} | {"unembed.weight"}
    present = {grape_to_lens_name(name): name for name in tensors}
    missing = sorted(lens_to_grape_name(name, variant) for name in expected - present.keys())
    surplus = sorted(name for ours, name in present.items() if ours not in expected)
    problems = ([f"missing weights (their {variant} model has them): {missing}"] if missing else []) + (
        [f"surplus weights (no module of their {variant} model): {surplus}"] if surplus else [])
    if problems:
        raise CheckpointError("GRAPE checkpoint does not match its config, refusing to load it partially — "
                              + " | ".join(problems))
