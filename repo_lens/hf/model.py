"""Load any Hugging Face causal LM for the generic (adapter-free) path, wrapped for nnsight."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.capture import forward_lock
from repo_lens.errors import CheckpointError, InputError
from repo_lens.inputs import check_batch_size, check_input_list, check_text
from repo_lens.lens_inputs import prepare_ids
from repo_lens.model.registry import NOPE_KIND, ROPE_KIND
from repo_lens.protocol import LensProtocol
from repo_lens.trace import Trace

NNSIGHT_HINT = "pip install nnsight   (or: pip install 'repo_lens[hf]')"
# warn when one layer's eager attention (scores + probabilities) would exceed this many bytes
MEMORY_WARNING_BYTES = 1 << 30
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _require_nnsight() -> Any:
    try:
        import nnsight
    except ImportError:
        raise InputError(f"the generic Hugging Face path needs nnsight; install it with `{NNSIGHT_HINT}`") from None
    return nnsight


@dataclass
class HFLens(LensProtocol):
    """A transformers causal LM (eager attention), its nnsight wrapper and tokenizer; satisfies
    :class:`repo_lens.protocol.LensProtocol` like :class:`repo_lens.Lens`, and inherits ``trace`` from it.

    ``hf_model``: the ``PreTrainedModel``; ``nn``: ``nnsight.NNsight(hf_model)``;
    ``layer_paths``: module path of each decoder layer's attention module. It has no repo_lens model
    (no ``.model``, no hook points), so it is no :class:`repo_lens.protocol.HookedLensProtocol`: what
    reads or edits a model through repo_lens' hooks refuses it.
    """

    hf_model: Any
    nn: Any
    tokenizer: Any
    layer_paths: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> Any:
        return self.hf_model.config

    @property
    def n_layers(self) -> int:
        return len(self.layer_paths)

    @property
    def n_heads(self) -> int:
        return int(_text_config(self.config).num_attention_heads)

    @property
    def vocab_size(self) -> int:
        return int(self.hf_model.get_input_embeddings().weight.shape[0])

    @property
    def context_length(self) -> int | None:
        value = getattr(_text_config(self.config), "max_position_embeddings", None)
        return int(value) if value else None

    @property
    def device(self) -> torch.device:
        return self.hf_model.get_input_embeddings().weight.device

    def envoy(self, path: str) -> Any:
        """The nnsight Envoy of the module at ``path`` (e.g. ``model.layers.3.self_attn``)."""
        node = self.nn
        for part in path.split("."):
            node = node[int(part)] if part.isdigit() else getattr(node, part)
        return node

    def encode(self, text: str) -> list[int]:
        check_text(text, self.tokenizer is not None)
        ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        if not ids:
            raise InputError(f"the tokenizer turns {text[:40]!r} into no tokens; pass other text or token ids")
        return ids

    def display_tokens(self, ids: Sequence[int]) -> list[str]:
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return self.tokenizer.batch_decode([[int(i)] for i in ids])

    def trace_batch(self, inputs: Sequence[Any], *, batch_size: int = 8, truncate: bool = False,
                    allow_beyond_context: bool = False, progress: bool = True) -> list[Trace]:
        """One Trace per input (a text or a sequence of token ids), in input order, one input per forward
        pass (``batch_size`` is checked; the generic path never pads inputs together). Positions
        (n_layers, n_heads, T): the ``position_ids`` the model gives its rotary embedding (every head of a
        layer shares them), ``layer_kinds`` "rope" (or "nope" for layers a config marks RoPE-free,
        position 0.0).
        """
        check_batch_size(batch_size)
        return [self._trace_one(one, truncate, allow_beyond_context)
                for one in tqdm(check_input_list(inputs), desc="tracing", unit="text", disable=not progress)]

    def _trace_one(self, inputs: Any, truncate: bool, allow_beyond_context: bool) -> Trace:
        ids, meta = prepare_ids(self, inputs, truncate=truncate, allow_beyond_context=allow_beyond_context)
        rotary = find_rotary_path(self.hf_model)
        if rotary is not None:
            saved: dict[str, Any] = {}
            input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
            with forward_lock(self.hf_model), torch.inference_mode(), self.nn.trace(input_ids) as tracer:
                args, kwargs = self.envoy(rotary).inputs
                position_ids = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
                saved["position_ids"] = position_ids.save()
                tracer.stop()
            position_ids = saved["position_ids"].detach().float().cpu().numpy().reshape(-1)
            meta["positions_source"] = f"position_ids passed to {rotary}"
        else:
            position_ids = np.arange(len(ids), dtype=np.float32)
            meta["positions_source"] = "0..T-1 (no rotary_emb module found; the model's own positions were not read)"
            meta["warnings"].append(meta["positions_source"])
        kinds = layer_kinds(self)
        positions = np.broadcast_to(position_ids.astype(np.float32), (self.n_layers, self.n_heads, len(ids))).copy()
        positions[[index for index, kind in enumerate(kinds) if kind == NOPE_KIND]] = 0.0
        text_config = _text_config(self.config)
        meta["mechanism"] = {
            "layer_kinds": kinds,
            "rope_parameters": _jsonable(getattr(text_config, "rope_parameters", None)
                                         or {"rope_theta": getattr(text_config, "rope_theta", None),
                                             "rope_scaling": getattr(text_config, "rope_scaling", None)}),
            "d_position": None,
        }
        return Trace(tokens=self.display_tokens(ids), token_ids=np.asarray(ids, dtype=np.int64), positions=positions,
                     layer_kinds=kinds, meta=meta)


def _text_config(config: Any) -> Any:
    """The language-model part of a (possibly multimodal) config."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def eager_attention_bytes(n_heads: int, n_tokens: int, dtype: torch.dtype = torch.float32) -> int:
    """Peak bytes of one layer's eager attention: scores [heads, T, T] in the model dtype, their
    fp32 softmax and the [T, T] mask — the generic path's dominant cost at long context.

    >>> eager_attention_bytes(32, 8192) // 2**20   # MiB: a 7B model (32 heads) at 8K tokens, fp32
    16640
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    return n_heads * n_tokens * n_tokens * (itemsize + 4) + n_tokens * n_tokens * 4


def memory_message(n_heads: int, n_tokens: int, dtype: torch.dtype) -> str:
    gib = eager_attention_bytes(n_heads, n_tokens, dtype) / 2**30
    return (
        f"the generic Hugging Face path reads eager attention weights, which materialise a "
        f"[{n_heads} heads × {n_tokens} × {n_tokens}] matrix in every layer (one layer at a time): about "
        f"{gib:.1f} GiB at {n_tokens} tokens in {str(dtype).replace('torch.', '')}. Memory grows with T²; "
        "for long contexts use a model repo_lens has an adapter for (Llama, OLMo-2, RePo: query rows only)"
    )


def find_attention_paths(hf_model: Any) -> list[str]:
    """Module path of every decoder layer's self-attention, in layer order."""
    n_layers = getattr(_text_config(hf_model.config), "num_hidden_layers", None)
    candidates = []
    for name, module in hf_model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h", "blocks"):
            if n_layers is None or len(module) == n_layers:
                candidates.append((name, module))
    if not candidates:
        raise CheckpointError(
            f"cannot find the decoder layers of {type(hf_model).__name__} (a ModuleList named 'layers', 'h' or "
            f"'blocks' with {n_layers} entries); this architecture is not supported by the generic path"
        )
    name, layers = candidates[0]
    paths = []
    for index, layer in enumerate(layers):
        for attribute in ("self_attn", "attn", "attention", "self_attention"):
            if isinstance(getattr(layer, attribute, None), torch.nn.Module):
                paths.append(f"{name}.{index}.{attribute}")
                break
        else:
            raise CheckpointError(
                f"layer {name}.{index} ({type(layer).__name__}) has no self_attn/attn/attention module; "
                "this architecture is not supported by the generic path"
            )
    return paths


def find_rotary_path(hf_model: Any) -> str | None:
    """Path of the model-level rotary embedding (it receives position_ids), if there is one."""
    for name, _ in hf_model.named_modules():
        if name.rsplit(".", 1)[-1] == "rotary_emb":
            return name
    return None


def load_hf(
    source: Any, *, tokenizer: Any = None, device: Any = "auto", dtype: Any = None, device_map: Any = None,
) -> HFLens:
    """A Hugging Face causal LM (directory with config.json + safetensors, or an already loaded
    ``PreTrainedModel``) with eager attention, wrapped in nnsight.

    ``device="auto"``: CUDA + bf16 when present, else CPU + fp32; ``device_map`` (e.g. "auto", needs
    accelerate) spreads a big model over several GPUs / CPU instead. Weights are read from
    safetensors only, offline; pickle checkpoints are refused.
    """
    nnsight = _require_nnsight()
    meta: dict[str, Any] = {}
    if isinstance(source, HFLens):
        return source
    if isinstance(source, (str, os.PathLike)):
        directory = Path(source).expanduser()
        hf_model, tokenizer = _load_directory(directory, tokenizer, device, dtype, device_map)
        meta.update(source=str(directory.resolve()), name=directory.name)
    elif isinstance(source, torch.nn.Module) and hasattr(source, "config"):
        hf_model = source
        _set_eager(hf_model)
        meta.update(source=type(source).__name__,
                    name=getattr(source.config, "_name_or_path", None) or type(source).__name__)
    else:
        raise InputError(
            f"expected a model directory, a transformers PreTrainedModel or an HFLens; got {type(source).__name__}"
        )
    hf_model.eval()
    first = next(hf_model.parameters())
    meta.update(format=f"hf-generic-{hf_model.config.model_type}", model_type=hf_model.config.model_type,
                dtype=str(first.dtype).replace("torch.", ""), device=str(first.device), pe_config=None,
                path="nnsight")
    return HFLens(hf_model=hf_model, nn=nnsight.NNsight(hf_model), tokenizer=tokenizer,
                  layer_paths=find_attention_paths(hf_model), meta=meta)


def _load_directory(directory: Path, tokenizer: Any, device: Any, dtype: Any, device_map: Any) -> tuple[Any, Any]:
    """(the causal LM saved in ``directory``, eager and offline, on its device; its tokenizer, or ``tokenizer``
    when one is given)."""
    if not (directory / "config.json").is_file():
        raise CheckpointError(
            f"{directory} is not a Hugging Face model directory (no config.json); pass a directory saved "
            "with save_pretrained, or an already loaded model"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from repo_lens.hf.learned_positions import refuse_learned_positions
    from repo_lens.model.loaders.device import resolve_device, resolve_dtype

    refuse_learned_positions(directory)
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    kwargs: dict[str, Any] = {"attn_implementation": "eager", "dtype": target_dtype, "local_files_only": True,
                              "use_safetensors": True}
    if device_map is not None:
        kwargs["device_map"] = device_map
    from safetensors import SafetensorError

    try:
        hf_model: Any = AutoModelForCausalLM.from_pretrained(str(directory), **kwargs)  # or a module with .config
    except SafetensorError as error:  # a weight file whose header reads but whose tensors do not
        raise CheckpointError(f"a safetensors file of {directory} cannot be read ({error}); it is truncated or "
                              "corrupt: download or save it again") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"transformers cannot load {directory} as a causal LM offline: {error}") from None
    if device_map is None:
        hf_model.to(target_device)
    if tokenizer is None and any((directory / name).exists() for name in _TOKENIZER_FILES):
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except (OSError, ValueError, KeyError):
            tokenizer = None
    return hf_model, tokenizer


def _set_eager(hf_model: Any) -> None:
    if getattr(hf_model.config, "_attn_implementation", None) == "eager":
        return
    setter = getattr(hf_model, "set_attn_implementation", None)
    if callable(setter):
        setter("eager")
    else:
        hf_model.config._attn_implementation = "eager"


def layer_kinds(hf_lens: HFLens) -> list[str]:
    """"rope" per layer; "nope" where the config switches RoPE off (SmolLM3 / Llama 4 ``no_rope_layers``,
    whose entry 1 means the layer *uses* RoPE)."""
    config = _text_config(hf_lens.config)
    flags = getattr(config, "no_rope_layers", None)
    if isinstance(flags, (list, tuple)) and len(flags) == hf_lens.n_layers:
        return [ROPE_KIND if flag else NOPE_KIND for flag in flags]
    return [ROPE_KIND] * hf_lens.n_layers


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
