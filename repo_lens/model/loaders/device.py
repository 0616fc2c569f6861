"""Device and dtype choice: CUDA + bf16 when present, else CPU + fp32."""

from __future__ import annotations

import torch

from repo_lens.errors import InputError

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N' (a str), not {type(device).__name__}")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise InputError(f"unknown device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if resolved.type not in ("cpu", "cuda"):
        raise InputError(f"device {device!r} is not supported (a model there holds no weights or cannot run); "
                         "use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but CUDA is not available here; use device='cpu' or 'auto'")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise InputError(f"device {device!r} does not exist; this machine has CUDA devices "
                         f"0..{torch.cuda.device_count() - 1}")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None picks bf16 on a CUDA device that supports it, fp32 otherwise."""
    if dtype is None:
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point or dtype.itemsize < 2:
            raise InputError(f"dtype {dtype} cannot hold the weights (they are real numbers); "
                             f"use a floating dtype, one of {sorted(_DTYPES)}")
        return dtype
    try:
        return _DTYPES[str(dtype)]
    except (KeyError, TypeError):
        raise InputError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None
