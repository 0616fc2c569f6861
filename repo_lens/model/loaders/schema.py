"""The types and ranges of config.json fields, checked before a model is built from them, for
HF OLMo-2/Llama configs and for repo_lens' own ``model`` section alike: a wrong field raises a
CheckpointError naming the field, its value and what is expected (never a TypeError later)."""

from __future__ import annotations

import math
from typing import Any, Callable

from repo_lens.errors import CheckpointError
from repo_lens.model.rotary import SUPPORTED_ROPE_TYPES

Check = Callable[[Any], bool]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


POSITIVE_INT: tuple[Check, str] = (lambda v: _integer(v) and v > 0, "a positive integer")
MAX_LAYERS = 10_000  # far above any real model; a larger count is a damaged file (and would exhaust memory)
LAYER_COUNT: tuple[Check, str] = (lambda v: _integer(v) and 0 < v <= MAX_LAYERS, f"an integer in 1..{MAX_LAYERS:,}")
NON_NEGATIVE_INT: tuple[Check, str] = (lambda v: _integer(v) and v >= 0, "a non-negative integer")
POSITIVE_NUMBER: tuple[Check, str] = (lambda v: _number(v) and v > 0, "a finite positive number")
NUMBER: tuple[Check, str] = (_number, "a finite number")
BOOLEAN: tuple[Check, str] = (lambda v: isinstance(v, bool), "true or false")
TEXT: tuple[Check, str] = (lambda v: isinstance(v, str), "a string")
OBJECT: tuple[Check, str] = (lambda v: isinstance(v, dict), "a JSON object")
TEXT_LIST: tuple[Check, str] = (lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
                                "a list of strings")


def optional(rule: tuple[Check, str]) -> tuple[Check, str]:
    check, expected = rule
    return (lambda v: v is None or check(v)), f"{expected} or null"


# field -> (rule, required); HF field names (transformers' OLMo-2 / Llama configs)
HF_FIELDS: dict[str, tuple[tuple[Check, str], bool]] = {
    "num_hidden_layers": (LAYER_COUNT, True), "num_attention_heads": (POSITIVE_INT, True),
    "hidden_size": (POSITIVE_INT, True), "intermediate_size": (POSITIVE_INT, True),
    "vocab_size": (POSITIVE_INT, True), "num_key_value_heads": (optional(POSITIVE_INT), False),
    "head_dim": (optional(POSITIVE_INT), False), "max_position_embeddings": (POSITIVE_INT, False),
    "rms_norm_eps": (POSITIVE_NUMBER, False), "rope_theta": (POSITIVE_NUMBER, False),
    "rope_scaling": (optional(OBJECT), False), "rope_parameters": (optional(OBJECT), False),
    "tie_word_embeddings": (BOOLEAN, False), "attention_bias": (BOOLEAN, False), "mlp_bias": (BOOLEAN, False),
    "pe_config": (optional(OBJECT), False), "hidden_act": (TEXT, False),
}
# ModelConfig field -> (rule, required); repo_lens' own checkpoints (config.json["model"])
NATIVE_FIELDS: dict[str, tuple[tuple[Check, str], bool]] = {
    "family": (TEXT, True), "vocab_size": (POSITIVE_INT, True), "d_model": (POSITIVE_INT, True),
    "n_layers": (LAYER_COUNT, True), "n_heads": (POSITIVE_INT, True), "d_mlp": (POSITIVE_INT, True),
    "layer_mechanisms": (TEXT_LIST, True), "n_kv_heads": (optional(POSITIVE_INT), False),
    "head_dim": (optional(POSITIVE_INT), False), "rms_norm_eps": (POSITIVE_NUMBER, False),
    "rope_theta": (POSITIVE_NUMBER, False), "rope_scaling": (optional(OBJECT), False),
    "max_position_embeddings": (POSITIVE_INT, False), "tie_word_embeddings": (BOOLEAN, False),
    "attention_bias": (BOOLEAN, False), "mlp_bias": (BOOLEAN, False), "d_position": (optional(POSITIVE_INT), False),
    "nope_position": (NUMBER, False), "lpi_hidden": (optional(POSITIVE_INT), False),
    "lpi_max_delta": (POSITIVE_NUMBER, False), "cope_max_position": (POSITIVE_INT, False),
    "forget_bias_init": (NUMBER, False), "extra": (OBJECT, False),
    "repo_dim": (optional(POSITIVE_INT), False),  # d_position's former name: configs saved with it load as they are
}
# numeric settings of a rope scaling dict, and those each rope type needs
ROPE_NUMBERS = ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
                "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "rope_theta")
ROPE_REQUIRED = {"linear": ("factor",), "dynamic": ("factor",),
                 "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def check_fields(config: dict[str, Any], fields: dict[str, tuple[tuple[Check, str], bool]], where: str) -> None:
    """Refuse a missing required field or a field of the wrong type or range.

    Example:
        >>> check_fields({"hidden_size": -64}, {"hidden_size": (POSITIVE_INT, True)}, "config.json")
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: config.json field hidden_size=-64 is invalid; expected a positive integer
    """
    for name, ((check, expected), required) in fields.items():
        if name not in config:
            if required:
                raise CheckpointError(f"{where} lacks the field {name!r}; expected {expected}")
            continue
        if not check(config[name]):
            raise CheckpointError(f"{where} field {name}={_shown(config[name])} is invalid; expected {expected}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_heads(d_model: int, n_heads: int, n_kv_heads: int | None, head_dim: int | None, where: str,
                names: tuple[str, str, str]) -> None:
    """Heads must split the model width (unless head_dim is given) and the key/value heads the heads."""
    d_name, heads_name, kv_name = names
    if head_dim is None and d_model % n_heads:
        raise CheckpointError(f"{where} field {d_name}={d_model} is not divisible by {heads_name}={n_heads}; "
                              "expected a multiple of the head count (or an explicit head_dim)")
    if n_kv_heads is not None and n_heads % n_kv_heads:
        raise CheckpointError(f"{where} field {kv_name}={n_kv_heads} does not divide {heads_name}={n_heads}; "
                              "expected a divisor of the head count")


def check_rope(scaling: dict[str, Any] | None, where: str) -> None:
    """A rope scaling / rope_parameters dict: a string type, finite numbers, the keys its type needs."""
    if not scaling:
        return
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if not isinstance(rope_type, str):
        raise CheckpointError(f"{where} rope_type={_shown(rope_type)} is invalid; expected a string such as "
                              "'linear', 'dynamic', 'yarn' or 'llama3'")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise CheckpointError(f"{where} rope_type={rope_type!r} is not supported; expected one of "
                              f"{', '.join(SUPPORTED_ROPE_TYPES)}")
    for key in ROPE_REQUIRED.get(rope_type, ()):
        if scaling.get(key) is None:
            raise CheckpointError(f"{where} of rope_type {rope_type!r} lacks {key!r}; expected a finite "
                                  "positive number")
    for key in ROPE_NUMBERS:
        value = scaling.get(key)
        if value is not None and not POSITIVE_NUMBER[0](value):
            raise CheckpointError(f"{where} {key}={_shown(value)} is invalid; expected a finite positive number")
    if rope_type == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise CheckpointError(f"{where} high_freq_factor={scaling['high_freq_factor']} is not above "
                              f"low_freq_factor={scaling['low_freq_factor']}; expected high > low")


def check_hf_config(config: dict[str, Any], where: str = "config.json") -> None:
    """Every field an HF OLMo-2 / Llama config is read for, checked.

    Example:
        >>> check_hf_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
        ...                  "vocab_size": 64, "pe_config": "swigluex_multihead"})
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: config.json lacks the field 'intermediate_size'; expected a positive integer
    """
    check_fields(config, HF_FIELDS, where)
    check_heads(config["hidden_size"], config["num_attention_heads"], config.get("num_key_value_heads"),
                config.get("head_dim"), where, ("hidden_size", "num_attention_heads", "num_key_value_heads"))
    check_rope(config.get("rope_scaling"), f"{where} rope_scaling")
    check_rope(config.get("rope_parameters"), f"{where} rope_parameters")


def check_native_model(model: Any, where: str = "config.json model") -> None:
    """repo_lens' own ``model`` section (ModelConfig's fields), checked.

    Example:
        >>> check_native_model({"family": "llama", "vocab_size": 257, "d_model": 16, "n_layers": 1,
        ...                     "n_heads": 3, "d_mlp": 32, "layer_mechanisms": ["x"]})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        repo_lens.errors.CheckpointError: config.json model field d_model=16 is not divisible by n_heads=3; ...
    """
    if not isinstance(model, dict):
        raise CheckpointError(f"{where} is {type(model).__name__}; expected a JSON object of ModelConfig fields")
    check_fields(model, NATIVE_FIELDS, where)
    check_heads(model["d_model"], model["n_heads"], model.get("n_kv_heads"), model.get("head_dim"), where,
                ("d_model", "n_heads", "n_kv_heads"))
    if len(model["layer_mechanisms"]) != model["n_layers"]:
        raise CheckpointError(f"{where} field layer_mechanisms has {len(model['layer_mechanisms'])} entries for "
                              f"n_layers={model['n_layers']}; expected one mechanism per layer")
    check_rope(model.get("rope_scaling"), f"{where} rope_scaling")
