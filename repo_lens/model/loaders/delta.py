"""A checkpoint that holds only what continued training changed on a base model: ``recipe.json`` (the
base, the mechanism of each re-positioned layer, the adapters' rank and scale) and ``delta.safetensors``
(the position modules' weights and the low-rank adapters' factors). Loading rebuilds the model from the
base and adds the difference, strictly: every tensor of the delta is used and every weight the
re-positioned model needs comes from the base or the delta.

Example:
    >>> is_delta_checkpoint(Path("/no/such/dir"))
    False
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.device import resolve_device, resolve_dtype
from repo_lens.model.loaders.loaded import LoadedModel, dtype_name
from repo_lens.model.loaders.packed import readable_file, shipped_file

RECIPE_FILE = "recipe.json"
DELTA_FILE = "delta.safetensors"
RECIPE_KEYS = ("base", "mechanism", "first_layer", "lora_rank", "lora_alpha", "adapted")


def is_delta_checkpoint(directory: Path) -> bool:
    return (directory / RECIPE_FILE).is_file() and not (directory / "config.json").exists()


def base_path(directory: Path, resolve: Callable[[str], Path] | None) -> Path:
    """Where the recipe's base lies: ``resolve`` (e.g. :func:`repo_lens.zoo.resolve_source`, which knows
    ``zoo:NAME``) of its ``base``, or that string as a path."""
    base = str(read_recipe(directory)["base"])
    return resolve(base) if resolve is not None else Path(base).expanduser()


def delta_files(directory: Path) -> list[Path]:
    """The delta's own files (its base's are the base's): ``delta.safetensors`` or its packed twin."""
    return [directory / RECIPE_FILE, shipped_file(directory / DELTA_FILE)]


def read_recipe(directory: Path) -> dict[str, Any]:
    try:
        recipe = json.loads((directory / RECIPE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{directory / RECIPE_FILE} cannot be read ({error}); restore it from the "
                              "checkpoint's source") from None
    missing = [key for key in RECIPE_KEYS if key not in recipe] if isinstance(recipe, dict) else list(RECIPE_KEYS)
    if missing:
        raise CheckpointError(f"{directory / RECIPE_FILE} lacks {', '.join(missing)}; it is not a recipe that "
                              "repo-lens train --base wrote")
    return recipe


def load_delta(directory: Path, base: LoadedModel, device: str | torch.device = "auto",
               dtype: str | torch.dtype | None = None) -> LoadedModel:
    """``base`` (the recipe's base, loaded in fp32 on the CPU) re-positioned and with the delta added (see
    the module's description)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from repo_lens.model.registry import ROPE_KIND
    from repo_lens.model.transformer import LensModel

    recipe = read_recipe(directory)
    shipped = shipped_file(directory / DELTA_FILE)
    try:
        delta = load_file(str(readable_file(shipped)))
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{shipped} cannot be read ({error}); restore it from the "
                              "checkpoint's source") from None
    n_layers, first = base.model.cfg.n_layers, int(recipe["first_layer"])
    kinds = [ROPE_KIND] * first + [recipe["mechanism"]] * (n_layers - first)
    model = LensModel(dataclasses.replace(base.model.cfg, layer_mechanisms=kinds))
    factors = {name: tensor for name, tensor in delta.items() if name.endswith((".lora_A", ".lora_B"))}
    positions = {name: tensor for name, tensor in delta.items() if name not in factors}
    expected = {f"blocks.{layer}.attn.{proj}.lora_{factor}" for layer in range(first, n_layers)
                for proj in recipe["adapted"] for factor in "AB"}
    needed = {name for name in model.state_dict() if ".attn.positions." in name}
    if set(factors) != expected or set(positions) != needed:
        wrong = sorted((set(factors) ^ expected) | (set(positions) ^ needed))
        raise CheckpointError(f"{shipped} does not fit its recipe ({len(wrong)} tensors missing or "
                              f"unexpected, e.g. {wrong[:3]}); it was written by another recipe or is damaged")
    weights = add_factors_to_weights(base.model.state_dict(), factors,
                                     float(recipe["lora_alpha"]) / int(recipe["lora_rank"]))
    weights.update({name: tensor.float() for name, tensor in positions.items()})
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as error:
        raise CheckpointError(f"the delta in {directory} does not fit its base {recipe['base']}: "
                              f"{str(error)[:300]}") from None
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    model = model.to(device=target_device, dtype=target_dtype).eval()
    card = {key: value for key, value in recipe.items() if key != "log"}
    meta = {**base.meta, "source": str(directory.resolve()), "format": "repo_lens-delta", "name": directory.name,
            "dtype": dtype_name(target_dtype), "device": str(target_device), "base": recipe["base"],
            "info": card}
    return LoadedModel(model=model, tokenizer=base.tokenizer, meta=meta)


def add_factors_to_weights(weights: dict[str, torch.Tensor], factors: dict[str, torch.Tensor],
                           alpha_over_rank: float) -> dict[str, torch.Tensor]:
    """``weights`` (a state dict) with each ``<module>.weight`` + scale · B A of low-rank ``factors``
    (``<module>.lora_A`` [rank, in], ``<module>.lora_B`` [out, rank]), computed in fp32.

    >>> w = {"proj.weight": torch.zeros(2, 2)}
    >>> f = {"proj.lora_A": torch.ones(1, 2), "proj.lora_B": torch.ones(2, 1)}
    >>> add_factors_to_weights(w, f, 0.5)["proj.weight"].tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    out = dict(weights)
    for key in factors:
        if key.endswith(".lora_A"):
            module = key[: -len(".lora_A")]
            base = out[f"{module}.weight"]
            delta = alpha_over_rank * factors[f"{module}.lora_B"].float() @ factors[key].float()
            out[f"{module}.weight"] = (base.float() + delta).to(base.dtype)
    return out
