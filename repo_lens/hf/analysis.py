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
from dataclasses import dataclass
from typing import Any, cast

import torch

from repo_lens.analysis.mass_rows import (AttentionMass, checked_inputs, key_groups, mass_from_group_sums,
                                          validate_layers)
from repo_lens.capture import forward_lock
from repo_lens.errors import InputError
from repo_lens.hf import model as _model
from repo_lens.hf.model import eager_attention_bytes, layer_kinds, load_hf, memory_message
from repo_lens.options import grouped_keywords, options_or_default
from repo_lens.trace import Trace


@dataclass(frozen=True, kw_only=True)
class HFLoadOptions:
    """How :func:`attention_mass_hf` loads a model it is given as a directory or a ``PreTrainedModel``
    (:func:`repo_lens.hf.load_hf`'s settings): its ``tokenizer`` (default: the one beside the weights),
    ``device`` ("auto": CUDA + bf16 when present, else CPU + fp32) and ``dtype``. An :class:`HFLens` is used
    as it is.

    Example:
        >>> HFLoadOptions(device="cpu").dtype is None
        True
    """

    tokenizer: Any = None
    device: Any = "auto"
    dtype: Any = None


def trace_hf(model: Any, text: Any, *, tokenizer: Any = None, truncate: bool = False,
             allow_beyond_context: bool = False, device: Any = "auto", dtype: Any = None) -> Trace | list[Trace]:
    """:meth:`HFLens.trace` of any HF causal LM: positions (n_layers, n_heads, T) are the
    ``position_ids`` the model gives its rotary embedding (every head of a layer shares them),
    ``layer_kinds`` "rope" (or "nope" for layers a config marks RoPE-free, position 0.0).

    ``model``: a model directory, a loaded ``PreTrainedModel`` or an :class:`HFLens`;
    ``text``: text, token ids or a list of texts.
    """
    hf_lens = load_hf(model, tokenizer=tokenizer, device=device, dtype=dtype)
    return hf_lens.trace(text, truncate=truncate, allow_beyond_context=allow_beyond_context)


@grouped_keywords("load", HFLoadOptions)
def attention_mass_hf(model: Any, ids: Any, spans: Mapping[str, tuple[int, int]], query: tuple[int, int], *,
                      layers: Sequence[int] | None = None, allow_beyond_context: bool = False,
                      load: HFLoadOptions | None = None) -> AttentionMass:
    """Attention mass per token that the query rows put on each span, for any HF causal LM.

    Same definition and result type as :func:`repo_lens.analysis.attention_mass` (RePo Table 4):
    per query row, the attention probability on each span summed over its keys and divided by its
    length, averaged over rows (``by_layer_head``) and over layers and heads (``per_token``);
    ``rest`` = every other key before ``query[0]``. Probabilities are the model's own eager
    attention weights (sliding windows, soft-capping and GQA included), reduced inside the nnsight
    trace. Memory: one layer's [heads, T, T] eager matrix at a time — a warning names the cost when
    it exceeds 1 GiB. ``load``: how a model given as a directory is loaded (:class:`HFLoadOptions`).
    """
    load = options_or_default(load, HFLoadOptions, "load")
    hf_lens = load_hf(model, tokenizer=load.tokenizer, device=load.device, dtype=load.dtype)
    array, (named, (q_start, q_end)) = checked_inputs(ids, spans, query, hf_lens.vocab_size, hf_lens.context_length,
                                                      allow_beyond_context)
    n_tokens = int(array.size)
    chosen = validate_layers(layers, hf_lens.n_layers)
    model_dtype = next(hf_lens.hf_model.parameters()).dtype
    if eager_attention_bytes(hf_lens.n_heads, n_tokens, model_dtype) > _model.MEMORY_WARNING_BYTES:
        warnings.warn(memory_message(hf_lens.n_heads, n_tokens, model_dtype), ResourceWarning, stacklevel=2)

    groups = key_groups(named, (q_start, q_end))
    sums: dict[int, Any] = {}
    input_ids = torch.as_tensor(array, device=hf_lens.device).unsqueeze(0)
    with forward_lock(hf_lens.hf_model), torch.inference_mode(), hf_lens.nn.trace(input_ids) as tracer:
        for layer in chosen:
            weights = hf_lens.envoy(hf_lens.layer_paths[layer]).output[1]
            if weights is None:
                raise InputError(
                    f"layer {layer} returned no attention weights; the model must run eager attention "
                    "(load it with attn_implementation='eager' or through repo_lens.hf.load_hf)"
                )
            rows = weights[0, :, q_start:q_end, :q_end]  # [head, R, keys]: the query rows only
            sums[layer] = cast(Any, groups.sum_rows(rows).mean(dim=1).cpu()).save()  # [head, groups]; an nnsight proxy
        tracer.stop()
    stacked = torch.stack([sums[layer] for layer in chosen]).numpy()  # [L, H, groups]
    kinds = layer_kinds(hf_lens)
    return mass_from_group_sums(stacked, groups, chosen, [kinds[layer] for layer in chosen])
