"""Big checkpoints over several GPUs (or GPU + CPU): accelerate's ``device_map`` for a LensModel.

The checkpoint is read strictly exactly as :func:`load_checkpoint` does (to CPU, in the target
dtype), then :func:`accelerate.dispatch_model` moves each top-level piece — the embedding, every
block, the final norm, the unembedding — to its device and hooks it so activations follow.
Blocks are never split between devices. Hook points, ``run_with_cache``, ``trace`` and
``attention_mass`` work unchanged (each hook sees tensors on its block's device; logits come
back on the device of the input ids).

CPU memory needed while loading: the weights once, in the target dtype (bf16: ≈ 2 bytes/param).

Users call ``repo_lens.load(path, device_map=..., max_memory=...)``, which wraps the result in a Lens.

Example (2 GPUs):
    >>> from repo_lens.model.loaders.device_map import load_dispatched       # doctest: +SKIP
    >>> loaded = load_dispatched("/ckpt/RePo-OLMo2-7B", device_map="auto",
    ...                          max_memory={0: "20GiB", 1: "20GiB"})        # doctest: +SKIP
    >>> loaded.meta["device_map"]["blocks.31"]                               # doctest: +SKIP
    '1'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from repo_lens.errors import InputError
from repo_lens.model.loaders.checkpoint import load_checkpoint
from repo_lens.model.loaders.device import resolve_dtype
from repo_lens.model.loaders.loaded import LoadedModel, dtype_name

AUTO_POLICIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _require_accelerate() -> Any:
    try:
        import accelerate
    except ImportError:
        raise InputError("device_map needs accelerate; install it with `pip install accelerate`") from None
    return accelerate


def no_split_classes(model: torch.nn.Module) -> list[str]:
    """Class names of the blocks (each kept whole on one device)."""
    return sorted({type(block).__name__ for block in cast(torch.nn.ModuleList, model.blocks)})


def plan_device_map(model: torch.nn.Module, device_map: Any = "auto", max_memory: dict | None = None,
                    dtype: torch.dtype | None = None) -> dict[str, Any]:
    """A device map {module path: device} for ``model``: an explicit dict is checked and returned;
    "auto" / "balanced" / "balanced_low_0" spread the blocks evenly over the GPUs in ``max_memory``
    (default: all visible GPUs, then CPU); "sequential" fills GPU 0 first."""
    accelerate = _require_accelerate()
    from accelerate.utils import get_balanced_memory

    if isinstance(device_map, dict):
        missing = _uncovered(model, device_map)
        if missing:
            raise InputError(f"device_map does not place {missing}; give every module a device (or use 'auto')")
        return dict(device_map)
    if device_map not in AUTO_POLICIES:
        raise InputError(f"unknown device_map {device_map!r}; pass a dict or one of {', '.join(AUTO_POLICIES)}")
    classes = no_split_classes(model)
    if device_map != "sequential":
        max_memory = get_balanced_memory(model, max_memory=max_memory, no_split_module_classes=classes, dtype=dtype,
                                         low_zero=device_map == "balanced_low_0")
    return accelerate.infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=classes,
                                            dtype=dtype)


def _uncovered(model: torch.nn.Module, device_map: dict[str, Any]) -> list[str]:
    """Modules holding parameters that no key of ``device_map`` covers."""
    if "" in device_map:
        return []

    def covered(name: str) -> bool:
        return any(name == key or name.startswith(key + ".") for key in device_map)

    def owner(name: str) -> str:  # "blocks.2" or a top-level module such as "unembed"
        parts = name.split(".")
        return ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]

    return sorted({owner(name) for name, _ in model.named_parameters() if not covered(name)})


def load_dispatched(source: str | Path, device_map: Any = "auto", dtype: Any = None,
                    max_memory: dict | None = None, offload_folder: str | None = None,
                    force_hooks: bool = False) -> LoadedModel:
    """Load a checkpoint directory or .gguf file (as :func:`load_checkpoint` does) spread over devices.

    ``dtype`` None: bf16 when CUDA supports it, else fp32. ``max_memory`` e.g.
    ``{0: "20GiB", 1: "20GiB", "cpu": "60GiB"}``; modules mapped to "cpu" run there (slow),
    "disk" needs ``offload_folder``. ``force_hooks`` attaches the device hooks even when everything
    lands on one device (for tests on CPU-only machines).
    """
    accelerate = _require_accelerate()
    target_dtype = resolve_dtype(dtype, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    loaded = load_checkpoint(source, device="cpu", dtype=target_dtype)
    model = loaded.model
    plan = plan_device_map(model, device_map, max_memory=max_memory, dtype=target_dtype)
    devices = set(plan.values())
    main_device = next((d for d in plan.values() if d not in ("cpu", "disk")), "cpu")
    if devices <= {"cpu"} and not force_hooks:
        model.to("cpu")  # nothing to dispatch
    else:
        model = accelerate.dispatch_model(model, device_map=plan, main_device=main_device,
                                          offload_dir=offload_folder, force_hooks=force_hooks)
    meta = {**loaded.meta, "device_map": {key: str(value) for key, value in plan.items()},
            "device": str(main_device), "dtype": dtype_name(target_dtype)}
    return LoadedModel(model=model, tokenizer=loaded.tokenizer, meta=meta)
