"""Trace and attention mass for any Hugging Face causal LM, through nnsight.

Positions: the ``position_ids`` the model itself hands its rotary embedding (0..T−1 for a plain
forward), read inside the trace; the forward stops right after. Attention mass: every layer's
*eager* attention probabilities are reduced inside the trace to per-span sums over the query
rows, so only [heads, groups] numbers per layer leave it — but eager attention itself builds a
[heads, T, T] matrix per layer (see :func:`repo_lens.hf.model.eager_attention_bytes`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from repo_lens.analysis.attention_mass import REST, AttentionMass, _validate
from repo_lens.errors import InputError
from repo_lens.inputs import token_ids
from repo_lens.hf import model as _model
from repo_lens.hf.model import HFLens, eager_attention_bytes, find_rotary_path, layer_kinds, load_hf, memory_message
from repo_lens.trace import Trace


def _ids(hf_lens: HFLens, inputs: Any) -> list[int]:
    vocab = int(hf_lens.hf_model.get_input_embeddings().weight.shape[0])
    return token_ids(inputs, hf_lens.encode, vocab)


def _check_length(hf_lens: HFLens, n_tokens: int, allowed: bool, what: str) -> None:
    limit = hf_lens.context_length
    if limit and n_tokens > limit and not allowed:
        raise InputError(
            f"the input is {n_tokens} tokens, longer than the model's context of {limit}; shorten it or pass "
            f"{what}"
        )


def trace_hf(model: Any, text: Any, *, tokenizer: Any = None, truncate: bool = False, device: Any = "auto",
             dtype: Any = None) -> Trace:
    """A :class:`repo_lens.Trace` of any HF causal LM: positions (n_layers, n_heads, T) are the
    ``position_ids`` the model gives its rotary embedding (every head of a layer shares them),
    ``layer_kinds`` "rope" (or "nope" for layers a config marks RoPE-free, position 0.0).

    ``model``: a model directory, a loaded ``PreTrainedModel`` or an :class:`HFLens`;
    ``text``: text or token ids.
    """
    hf_lens = load_hf(model, tokenizer=tokenizer, device=device, dtype=dtype)
    ids = _ids(hf_lens, text)
    meta: dict[str, Any] = {**hf_lens.meta, "warnings": [], "truncation": None}
    limit = hf_lens.context_length
    if limit and len(ids) > limit:
        _check_length(hf_lens, len(ids), truncate, f"truncate=True to keep the first {limit} tokens")
        meta["truncation"] = {"original_tokens": len(ids), "kept_tokens": limit}
        ids = ids[:limit]
    input_ids = torch.tensor([ids], dtype=torch.long, device=hf_lens.device)
    rotary = find_rotary_path(hf_lens.hf_model)
    if rotary is not None:
        saved: dict[str, Any] = {}
        with torch.inference_mode(), hf_lens.nn.trace(input_ids) as tracer:
            args, kwargs = hf_lens.envoy(rotary).inputs
            position_ids = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
            saved["position_ids"] = position_ids.save()
            tracer.stop()
        position_ids = saved["position_ids"].detach().float().cpu().numpy().reshape(-1)
        meta["positions_source"] = f"position_ids passed to {rotary}"
    else:
        position_ids = np.arange(len(ids), dtype=np.float32)
        meta["positions_source"] = "0..T-1 (no rotary_emb module found; the model's own positions were not read)"
        meta["warnings"].append(meta["positions_source"])
    kinds = layer_kinds(hf_lens)
    positions = np.broadcast_to(position_ids.astype(np.float32), (hf_lens.n_layers, hf_lens.n_heads, len(ids))).copy()
    positions[[index for index, kind in enumerate(kinds) if kind == "nope"]] = 0.0
    text_config = hf_lens.config.get_text_config() if hasattr(hf_lens.config, "get_text_config") else hf_lens.config
    meta["mechanism"] = {
        "layer_kinds": kinds,
        "rope_parameters": _jsonable(getattr(text_config, "rope_parameters", None)
                                     or {"rope_theta": getattr(text_config, "rope_theta", None),
                                         "rope_scaling": getattr(text_config, "rope_scaling", None)}),
        "repo_dim": None,
    }
    return Trace(tokens=hf_lens.display_tokens(ids), token_ids=np.asarray(ids, dtype=np.int64), positions=positions,
                 layer_kinds=kinds, meta=meta)


def attention_mass_hf(
    model: Any,
    ids: Any,
    spans: Mapping[str, tuple[int, int]],
    query: tuple[int, int],
    *,
    layers: Sequence[int] | None = None,
    tokenizer: Any = None,
    allow_beyond_context: bool = False,
    device: Any = "auto",
    dtype: Any = None,
) -> AttentionMass:
    """Attention mass per token that the query rows put on each span, for any HF causal LM.

    Same definition and result type as :func:`repo_lens.analysis.attention_mass` (RePo Table 4):
    per query row, the attention probability on each span summed over its keys and divided by its
    length, averaged over rows (``by_layer_head``) and over layers and heads (``per_token``);
    ``rest`` = every other key before ``query[0]``. Probabilities are the model's own eager
    attention weights (sliding windows, soft-capping and GQA included), reduced inside the nnsight
    trace. Memory: one layer's [heads, T, T] eager matrix at a time — a warning names the cost when
    it exceeds 1 GiB.
    """
    hf_lens = load_hf(model, tokenizer=tokenizer, device=device, dtype=dtype)
    if isinstance(ids, str):
        raise InputError("attention_mass_hf takes token ids, not text; encode the text first (e.g. tokenizer(text))")
    array = np.asarray(_ids(hf_lens, ids), dtype=np.int64)
    n_tokens = int(array.size)
    _check_length(hf_lens, n_tokens, allow_beyond_context,
                  "allow_beyond_context=True to measure attention beyond the trained length")
    named, (q_start, q_end) = _validate(spans, query, n_tokens)
    n_layers = hf_lens.n_layers
    if layers is None:
        chosen = list(range(n_layers))
    else:
        chosen = sorted({int(layer) for layer in layers})
        bad = [layer for layer in layers if isinstance(layer, bool) or int(layer) != layer
               or not 0 <= int(layer) < n_layers]
        if bad or not chosen:
            raise InputError(f"unknown layers {list(bad) or list(layers)}; the model has layers 0..{n_layers - 1}")
    model_dtype = next(hf_lens.hf_model.parameters()).dtype
    if eager_attention_bytes(hf_lens.n_heads, n_tokens, model_dtype) > _model.MEMORY_WARNING_BYTES:
        warnings.warn(memory_message(hf_lens.n_heads, n_tokens, model_dtype), ResourceWarning, stacklevel=2)

    names = list(named) + [REST]
    rest_group, self_group = len(named), len(named) + 1
    groups = torch.full((q_end,), rest_group, dtype=torch.long)
    groups[q_start:q_end] = self_group
    lengths: dict[str, int] = {}
    for index, (name, (start, end)) in enumerate(named.items()):
        groups[start:min(end, q_end)] = index
        lengths[name] = end - start
    lengths[REST] = q_start - sum(min(end, q_start) - min(start, q_start) for start, end in named.values())
    n_groups = self_group + 1
    groups = groups.to(hf_lens.device)

    sums: dict[int, Any] = {}
    input_ids = torch.as_tensor(array, device=hf_lens.device).unsqueeze(0)
    with torch.inference_mode(), hf_lens.nn.trace(input_ids) as tracer:
        for layer in chosen:
            weights = hf_lens.envoy(hf_lens.layer_paths[layer]).output[1]
            if weights is None:
                raise InputError(
                    f"layer {layer} returned no attention weights; the model must run eager attention "
                    "(load it with attn_implementation='eager' or through repo_lens.hf.load_hf)"
                )
            rows = weights[0, :, q_start:q_end, :q_end].float()  # [head, R, keys]: the query rows only
            reduced = torch.zeros(rows.shape[0], rows.shape[1], n_groups, dtype=torch.float32, device=rows.device)
            reduced.index_add_(-1, groups.to(rows.device), rows)
            sums[layer] = reduced.mean(dim=1).cpu().save()  # [head, groups]
        tracer.stop()
    stacked = torch.stack([sums[layer] for layer in chosen]).double().numpy()  # [L, H, groups]
    by_layer_head: dict[str, np.ndarray] = {}
    per_token: dict[str, float] = {}
    for index, name in enumerate(names):
        length = lengths[name]
        values = stacked[:, :, index] / length if length > 0 else np.full(stacked.shape[:2], np.nan)
        by_layer_head[name] = values
        per_token[name] = float(values.mean())
    kinds = layer_kinds(hf_lens)
    return AttentionMass(per_token=per_token, by_layer_head=by_layer_head, span_lengths=lengths,
                         query=(q_start, q_end), self_mass=stacked[:, :, self_group], layers=chosen,
                         layer_kinds=[kinds[layer] for layer in chosen])


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
