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
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.device import resolve_device, resolve_dtype
from repo_lens.model.loaders.loaded import LoadedModel, dtype_name
from repo_lens.model.loaders.native.packed import readable_file, shipped_file

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


MAX_BASE_CHAIN = 32  # deltas on deltas: far more than any recipe makes


def base_chain(directory: Path, resolve: Callable[[str], Path] | None) -> list[Path]:
    """``directory`` (a delta checkpoint), its base, the base's base, ... down to the first model that is not a
    delta. A chain that comes back to a folder it passed (a delta whose base is itself, two deltas naming
    each other) or runs on past ``MAX_BASE_CHAIN`` is a CheckpointError naming the chain.

    >>> base_chain(Path("/no/such/dir"), None)
    [PosixPath('/no/such/dir')]
    """
    chain, seen = [directory], {_identity(directory)}
    while is_delta_checkpoint(chain[-1]):
        base = base_path(chain[-1], resolve)
        shown = " -> ".join(str(path) for path in [*chain, base])
        if _identity(base) in seen:
            raise CheckpointError(f"the base of {chain[-1] / RECIPE_FILE} leads back to a folder already on the way "
                                  f"({shown}), so it never reaches a model; set its base to the model it was "
                                  "trained on")
        if len(chain) > MAX_BASE_CHAIN:
            raise CheckpointError(f"the chain of bases from {directory} is longer than {MAX_BASE_CHAIN} deltas "
                                  f"({shown}); set the base in recipe.json to the model it was trained on")
        chain.append(base)
        seen.add(_identity(base))
    return chain


def _identity(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop resolves to nothing: compare the path as written
        return path.expanduser().absolute()


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
    problem = _recipe_problem(recipe)
    if problem:
        raise CheckpointError(f"{directory / RECIPE_FILE}: {problem}; restore it from the checkpoint's source")
    return recipe


def _recipe_problem(recipe: dict[str, Any]) -> str | None:
    """What is wrong with the fields the loader reads, or None."""
    def whole(value: Any, low: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= low

    if not isinstance(recipe["base"], str) or not recipe["base"].strip():
        return f"base is {recipe['base']!r}, expected the base model's path or 'zoo:NAME'"
    if not isinstance(recipe["mechanism"], str) or not recipe["mechanism"]:
        return f"mechanism is {recipe['mechanism']!r}, expected a mechanism name such as 'repo'"
    if not whole(recipe["first_layer"], 0):
        return f"first_layer is {recipe['first_layer']!r}, expected a whole number ≥ 0"
    if "adapters_from" in recipe and not whole(recipe["adapters_from"], 0):
        return f"adapters_from is {recipe['adapters_from']!r}, expected a whole number ≥ 0 (the first adapted layer)"
    if not whole(recipe["lora_rank"], 1):
        return f"lora_rank is {recipe['lora_rank']!r}, expected a whole number ≥ 1"
    alpha = recipe["lora_alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        return f"lora_alpha is {alpha!r}, expected a finite number"
    adapted = recipe["adapted"]
    if not isinstance(adapted, list) or not all(isinstance(name, str) and name for name in adapted):
        return f"adapted is {adapted!r}, expected a list of projection names such as 'q_proj'"
    return None


def load_delta(directory: Path, base: LoadedModel, device: str | torch.device = "auto",
               dtype: str | torch.dtype | None = None) -> LoadedModel:
    """``base`` (the recipe's base, loaded in fp32 on the CPU) re-positioned and with the delta added (see
    the module's description)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from repo_lens.model.former_names import current_state_key
    from repo_lens.model.increments import is_position_weight
    from repo_lens.model.registry import ROPE_KIND
    from repo_lens.model.transformer import LensModel

    recipe = read_recipe(directory)
    shipped = shipped_file(directory / DELTA_FILE)
    try:
        delta = load_file(str(readable_file(shipped)))
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{shipped} cannot be read ({error}); restore it from the "
                              "checkpoint's source") from None
    for name, tensor in delta.items():
        if not tensor.dtype.is_floating_point or not torch.isfinite(tensor).all():
            raise CheckpointError(f"{shipped}: tensor {name} holds NaN or infinite values (or is not floating point), "
                                  "so the model would compute nothing; restore it from the checkpoint's source")
    n_layers = base.model.cfg.n_layers
    first, adapted = _layers(directory, recipe, n_layers)
    kinds = [ROPE_KIND] * first + [recipe["mechanism"]] * (n_layers - first)
    model = LensModel(dataclasses.replace(base.model.cfg, layer_mechanisms=kinds))
    factors = {name: tensor for name, tensor in delta.items() if name.endswith((".lora_A", ".lora_B"))}
    # position weights under their current names (a delta saved under former ones, attn.positions.*, loads too)
    positions = {current_state_key(name): tensor for name, tensor in delta.items() if name not in factors}
    expected = {f"blocks.{layer}.attn.{proj}.lora_{factor}" for layer in range(adapted, n_layers)
                for proj in recipe["adapted"] for factor in "AB"}
    needed = {name for name in model.state_dict() if is_position_weight(name)}
    if set(factors) != expected or set(positions) != needed:
        wrong = sorted((set(factors) ^ expected) | (set(positions) ^ needed))
        raise CheckpointError(f"{shipped} does not fit its recipe ({len(wrong)} tensors missing or "
                              f"unexpected, e.g. {wrong[:3]}); it was written by another recipe or is damaged")
    try:
        weights = add_factors_to_weights(base.model.state_dict(), factors,
                                         float(recipe["lora_alpha"]) / int(recipe["lora_rank"]))
    except (RuntimeError, KeyError) as error:
        raise CheckpointError(f"the adapters in {shipped} do not fit their base {recipe['base']} "
                              f"({type(error).__name__}: {str(error)[:200]}); it was trained on another base or "
                              "is damaged") from None
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


def _layers(directory: Path, recipe: dict[str, Any], n_layers: int) -> tuple[int, int]:
    """(first re-positioned layer, first adapted layer) of ``recipe``, both layers of the base."""
    first = int(recipe["first_layer"])
    adapted = int(recipe.get("adapters_from", first))  # a delta from before adapters_from adapts from first_layer
    for key, layer in (("first_layer", first), ("adapters_from", adapted)):
        if layer >= n_layers:
            raise CheckpointError(f"{directory / RECIPE_FILE}: {key} is {layer}, but its base {recipe['base']} has "
                                  f"{n_layers} layers; the delta was trained on another base")
    return first, adapted


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
