"""Weights stored at lower precision in repo_lens' own format: each 2-D floating weight (embeddings,
linear weights) as int8 codes with one scale per row (row = dim 0); every other tensor (norms, biases,
1-D and 0-D tensors) stays in the checkpoint's float dtype. config.json declares it with a top-level
``"storage": {"scheme": "int8-rows", "levels": L}``, L one of 127 (``int8``), 63 (``int7``) or 31
(``int6``).

A row ``w`` is stored as ``scale = bfloat16(max|w| / L)`` (rounded to nearest) and
``codes = clamp(round(w / scale), −L, L)`` as int8, computed in float32 with round half to even (a row of
zeros: scale 0, codes 0). Its scale is the tensor ``NAME.row_scale`` (bfloat16, one value per row) next to
the codes ``NAME``. A load gives back ``codes × scale`` in float32 before the model sees the weights, and
quantizing those values again gives the same codes and scales.

Example:
    >>> weight = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0]])
    >>> codes, scale = quantize_rows(weight, storage_levels("int6"))
    >>> codes.tolist(), scale.tolist()
    ([[16, -31, 8], [0, 0, 0]], [0.0322265625, 0.0])
    >>> dequantize_rows(codes, scale)[0].tolist()
    [0.515625, -0.9990234375, 0.2578125]
"""

from __future__ import annotations

from typing import Any

import torch

from repo_lens.errors import CheckpointError, InputError

STORAGE_KEY = "storage"
SCHEME = "int8-rows"
SCALE_SUFFIX = ".row_scale"
SCALE_DTYPE = torch.bfloat16
CODE_DTYPE = torch.int8
# the storage names (``TrainConfig.ship_dtype``, ``repo-lens zoo --storage``) and their level counts
STORAGE_LEVELS: dict[str, int] = {"int8": 127, "int7": 63, "int6": 31}


def storage_levels(name: object) -> int:
    """The level count L of storage ``name`` ("int8": 127, "int7": 63, "int6": 31); an InputError otherwise.

    >>> storage_levels("int7")
    63
    """
    if not isinstance(name, str) or name not in STORAGE_LEVELS:
        raise InputError(f"storage {name!r} is not a weight storage of repo_lens; use one of "
                         f"{', '.join(STORAGE_LEVELS)} (2-D weights as int8 codes in ±127, ±63 or ±31 with a "
                         "bfloat16 scale per row)")
    return STORAGE_LEVELS[name]


def storage_name(levels: int) -> str:
    """The storage name of a level count.

    >>> storage_name(31)
    'int6'
    """
    return {count: name for name, count in STORAGE_LEVELS.items()}[levels]


def storage_field(levels: int) -> dict[str, Any]:
    """config.json's ``storage`` field for ``levels``.

    >>> storage_field(31)
    {'scheme': 'int8-rows', 'levels': 31}
    """
    return {"scheme": SCHEME, "levels": levels}


def read_storage_field(config: dict[str, Any], where: str) -> int | None:
    """The level count config.json's ``storage`` field declares (None when the field is absent); a field of
    another form, scheme or level count is a CheckpointError naming it."""
    if STORAGE_KEY not in config:
        return None
    field = config[STORAGE_KEY]
    allowed = ", ".join(str(levels) for levels in STORAGE_LEVELS.values())
    expected = f'expected {{"scheme": "{SCHEME}", "levels": L}} with L one of {allowed}'
    if not isinstance(field, dict) or set(field) != {"scheme", "levels"}:
        raise CheckpointError(f"{where} field storage={field!r} is invalid; {expected}")
    if field["scheme"] != SCHEME:
        raise CheckpointError(f"{where} field storage.scheme={field['scheme']!r} is unknown; {expected} (a newer "
                              "repo_lens may have written it: upgrade repo_lens)")
    levels = field["levels"]
    if isinstance(levels, bool) or levels not in STORAGE_LEVELS.values():
        raise CheckpointError(f"{where} field storage.levels={levels!r} is not a supported level count; {expected}")
    return int(levels)


def is_quantizable(tensor: torch.Tensor) -> bool:
    """Whether a tensor is stored quantized: a 2-D floating one (an embedding or a linear weight)."""
    return tensor.ndim == 2 and tensor.is_floating_point()


def quantize_rows(weight: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes, bfloat16 scale per row) of a 2-D weight, symmetric absmax per row at ``levels``."""
    values = weight.detach().cpu().float()
    scale = (values.abs().amax(dim=1) / levels).to(SCALE_DTYPE)
    wide = scale.float()[:, None]
    ratio = torch.where(wide > 0, values / wide, 0.0)  # a row of zeros: scale 0, codes 0
    codes = torch.round(ratio).clamp(-levels, levels).to(CODE_DTYPE)
    return codes.contiguous(), scale.contiguous()


def dequantize_rows(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``codes × scale`` per row, in float32."""
    return codes.float() * scale.float()[:, None]


def quantize_state(state: dict[str, torch.Tensor], levels: int,
                   rest_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """``state`` as a quantized checkpoint stores it: each 2-D floating tensor as its codes (same name) and
    ``NAME.row_scale``; every other floating tensor cast to ``rest_dtype`` (kept as it is when None).
    Non-finite weights are an InputError naming them: they have no scale.

    >>> stored = quantize_state({"w": torch.ones(2, 3), "norm": torch.ones(3)}, 127, torch.bfloat16)
    >>> {name: str(tensor.dtype) for name, tensor in stored.items()}
    {'w': 'torch.int8', 'w.row_scale': 'torch.bfloat16', 'norm': 'torch.bfloat16'}
    """
    stored: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name.endswith(SCALE_SUFFIX):
            raise InputError(f"tensor {name!r} ends in {SCALE_SUFFIX!r}, the suffix of a quantized weight's scale; "
                             "rename it before storing the model quantized")
        if is_quantizable(tensor):
            if not torch.isfinite(tensor).all():
                raise InputError(f"weight {name!r} holds NaN or infinite values and cannot be quantized; "
                                 "store a model with finite weights")
            stored[name], stored[name + SCALE_SUFFIX] = quantize_rows(tensor, levels)
        else:
            cast = rest_dtype if rest_dtype is not None and tensor.is_floating_point() else tensor.dtype
            stored[name] = tensor.detach().cpu().to(cast).contiguous()
    return stored


def dequantize_state(tensors: dict[str, torch.Tensor], levels: int, where: str) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint stored at ``levels``, each code tensor replaced by ``codes × scale``
    (float32) and its scale dropped, after checking every pair: a code tensor without its scale, a scale
    without its codes, a code tensor that is not int8 or not 2-D, a scale that is not bfloat16, of another
    shape than (rows,), negative or not finite, and codes outside ±``levels`` are CheckpointErrors naming the
    tensor (``where``: the checkpoint)."""
    fix = "re-store the checkpoint with repo_lens.model.loaders.quantize_checkpoint, or restore it from its source"
    for name in tensors:
        if name.endswith(SCALE_SUFFIX) and name[:-len(SCALE_SUFFIX)] not in tensors:
            raise CheckpointError(f"{where}: scale {name!r} has no code tensor {name[:-len(SCALE_SUFFIX)]!r}; "
                                  f"expected each scale next to its int8 codes; {fix}")
    restored: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        scale = tensors.get(name + SCALE_SUFFIX)
        if scale is None:
            if tensor.dtype == CODE_DTYPE:
                raise CheckpointError(f"{where}: int8 code tensor {name!r} has no scale {name + SCALE_SUFFIX!r}; "
                                      f"expected one bfloat16 scale per row next to it; {fix}")
            restored[name] = tensor
            continue
        _check_pair(name, tensor, scale, levels, f"{where}: {fix}")
        restored[name] = dequantize_rows(tensor, scale)
    return restored


def _check_pair(name: str, codes: torch.Tensor, scale: torch.Tensor, levels: int, fix: str) -> None:
    """Refuse a code tensor and scale that are not what :func:`quantize_rows` writes, naming them."""
    if codes.dtype != CODE_DTYPE or codes.ndim != 2:
        raise CheckpointError(f"code tensor {name!r} is {str(codes.dtype).replace('torch.', '')} of shape "
                              f"{tuple(codes.shape)}; a tensor with a scale must be 2-D int8 codes (never cast "
                              f"silently) — {fix}")
    scale_name = name + SCALE_SUFFIX
    if scale.dtype != SCALE_DTYPE or tuple(scale.shape) != (codes.shape[0],):
        raise CheckpointError(f"scale {scale_name!r} is {str(scale.dtype).replace('torch.', '')} of shape "
                              f"{tuple(scale.shape)}; expected bfloat16 of shape ({codes.shape[0]},), one per row "
                              f"of {name!r} — {fix}")
    if not (torch.isfinite(scale).all() and (scale >= 0).all()):
        raise CheckpointError(f"scale {scale_name!r} holds negative, NaN or infinite values; expected finite "
                              f"scales ≥ 0 — {fix}")
    largest = int(codes.abs().max()) if codes.numel() else 0
    if largest > levels:
        raise CheckpointError(f"code tensor {name!r} holds codes up to ±{largest}, outside the ±{levels} its "
                              f"storage field declares (levels {levels}) — {fix}")


def refuse_codes(tensors: dict[str, torch.Tensor], where: str) -> None:
    """Refuse int8 tensors or scales in a checkpoint whose config.json declares no storage: they would be
    read as numbers of another kind (never cast silently)."""
    found = sorted(name for name, tensor in tensors.items()
                   if tensor.dtype == CODE_DTYPE or name.endswith(SCALE_SUFFIX))
    if found:
        raise CheckpointError(
            f"{where} holds quantized tensors ({', '.join(found[:5])}) but its config.json has no storage field; "
            f'add "storage": {{"scheme": "{SCHEME}", "levels": L}} with the level count they were written with '
            f'(and "repo_lens_format": 2), or re-save the checkpoint with repo_lens')


def stored_values(state: dict[str, torch.Tensor], levels: int, rest_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """What a load of ``state`` stored at ``levels`` (other floats in ``rest_dtype``) gives back, in float32:
    the weights to measure a model on before it is saved so.

    >>> values = stored_values({"w": torch.tensor([[0.3, -1.0]]), "b": torch.tensor([0.3])}, 31, torch.bfloat16)
    >>> values["w"].tolist(), values["b"].tolist()
    ([[0.2900390625, -0.9990234375]], [0.30078125])
    """
    restored = dequantize_state(quantize_state(state, levels, rest_dtype), levels, "model")
    return {name: tensor.float() if tensor.is_floating_point() else tensor for name, tensor in restored.items()}
