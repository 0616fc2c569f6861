"""Attention mass per token on named spans, from a set of query rows (RePo §5.1, Table 4).

For query rows ``query=(start, end)`` (e.g. the generated answer tokens of a NIAH prompt),
every row's attention probabilities are summed over each named span's keys and divided by
the span's length ("mass per token"), then averaged over rows (``by_layer_head``) and over
layers and heads (``per_token``). The extra span ``rest`` holds every other key before
``query.start``; keys inside the query rows count in no span (their total is ``self_mass``).

Only the query rows of the attention pattern are ever computed. In one forward pass, hooks file
each chosen layer's ``hook_rot_q`` and ``hook_rot_k`` (the queries and keys q·k uses: rotated,
one key per query head, so this holds for every rotary mechanism and GQA alike) and the hooks its
mechanism's ``query_rows_bias`` reads (``row_bias_hooks``; a mechanism that biases the logits
gives the bias of the query rows only). In a model with a decay (``ModelConfig.decay``) the layer's
rows add the decay's bias A_i − A_j, from the layer's ``hook_decay``. As soon as a layer has all of them, in whatever order
the hooks fired, softmax(q·kᵀ/√d_head + bias + causal mask) of its query rows is computed in fp32
for at most ``_ELEMENT_BUDGET`` scores at a time and reduced to per-span sums at once. Memory is
O(heads · rows · T) in bounded chunks, never T × T. The forward pass stops once every chosen
layer is reduced, so the rest of the last one and the unembedding are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from repo_lens.analysis.mass_rows import (
    REST,
    AttentionMass,
    KeyGroups,
    checked_inputs,
    key_groups,
    mass_from_group_sums,
    validate_layers,
    validate_spans,
)
from repo_lens.capture import forward_lock, is_out_of_memory, memory_limit_error
from repo_lens.errors import InputError
from repo_lens.model.decay import layer_decay_rows
from repo_lens.model.registry import mechanism_traits
from repo_lens.inputs import length_batches
from repo_lens.protocol import HookedLensProtocol

if TYPE_CHECKING:
    from repo_lens.model import LensModel

__all__ = ["REST", "AttentionMass", "KeyGroups", "attention_mass", "attention_mass_batch", "checked_inputs",
           "key_groups", "mass_from_group_sums", "validate_layers", "validate_spans"]

# Largest number of fp32 scores materialised at once (heads × rows × keys): 8 MiB.
_ELEMENT_BUDGET = 1 << 21
# The attention hooks holding what q·k uses, [batch, pos, head, d_head] (keys one per query head).
_QUERY_HOOK, _KEY_HOOK = "hook_rot_q", "hook_rot_k"

Prompt = tuple[np.ndarray, dict[str, tuple[int, int]], tuple[int, int]]  # checked (ids, spans, query rows)
# A mechanism's query_rows_bias: (hooked tensors of one sequence, rows, scores, row_index, key_index) -> bias
RowBias = Callable[..., torch.Tensor]
# What biases a layer's rows: an object with query_rows_bias and row_bias_hooks (a mechanism, or a model's decay)
RowBiasSource = Any


class _StopForward(Exception):
    """Raised once every chosen layer is reduced: the rest of the forward pass is not needed."""


def _model_of(lens_or_model: HookedLensProtocol | LensModel) -> LensModel:
    model = getattr(lens_or_model, "model", lens_or_model)
    if not hasattr(model, "cfg") or not hasattr(model, "hooks"):
        alternative = ("; for a Hugging Face model loaded by repo_lens.hf.load_hf use repo_lens.hf.attention_mass_hf "
                       "(the same measure, from the model's eager attention weights)"
                       if hasattr(lens_or_model, "hf_model") else "")
        raise InputError(
            f"attention_mass needs a Lens (with .model) or a LensModel; got {type(lens_or_model).__name__}"
            + alternative
        )
    return cast("LensModel", model)


def _row_bias_of(attention: Any, kind: str) -> RowBiasSource | None:
    """What biases the layer's rows (``query_rows_bias`` and ``row_bias_hooks``): the model's decay where it has
    one, else the mechanism if its logits are more than q·k/√d, else None. A biasing mechanism without
    ``query_rows_bias`` is refused rather than given wrong numbers."""
    decay = layer_decay_rows(attention)
    if decay is not None:
        return decay
    mechanism = attention.mechanism
    if not mechanism_traits(kind).biases_logits:
        return None
    if getattr(mechanism, "query_rows_bias", None) is None:
        raise InputError(
            f"attention_mass recomputes attention row by row and cannot bias the rows of layers of kind {kind!r} "
            "(its mechanism has no query_rows_bias); restrict `layers` to the other layers"
        )
    return mechanism


class _RowReducer:
    """Reduces the query rows' attention of one layer and one sequence to per-group sums, chunk by chunk."""

    def __init__(self, groups: KeyGroups, d_head: int) -> None:
        self.groups = groups  # every key the query rows see (0 .. query end − 1) is in one of its groups
        self.query = groups.query
        self.scale = 1.0 / math.sqrt(d_head)

    def __call__(self, q_rows: torch.Tensor, keys: torch.Tensor, bias: Callable[..., torch.Tensor] | None = None
                 ) -> torch.Tensor:
        """q_rows [head, R, d_head], keys [head, T, d_head] -> sums [head, R, groups.count] (fp32).
        ``bias(rows, masked_scores, row_index, key_index)`` -> [head, r, keys] is added to the logits."""
        q_start, q_end = self.query
        keys32 = keys[:, :q_end].float()  # the query rows see nothing later
        n_heads, n_rows, _ = q_rows.shape
        n_keys = keys32.shape[1]
        out = torch.zeros(n_heads, n_rows, self.groups.count, dtype=torch.float32, device=keys.device)
        chunk = max(1, _ELEMENT_BUDGET // max(1, n_heads * n_keys))
        key_index = torch.arange(n_keys, device=keys.device)
        for first in range(0, n_rows, chunk):
            rows = q_rows[:, first:first + chunk].float()
            scores = torch.matmul(rows, keys32.transpose(-1, -2)).mul_(self.scale)  # [head, r, keys]
            row_index = torch.arange(q_start + first, q_start + first + rows.shape[1], device=keys.device)
            scores.masked_fill_(key_index[None, :] > row_index[:, None], float("-inf"))
            if bias is not None:
                scores = scores + bias(rows, scores, row_index, key_index)
            probs = torch.softmax(scores, dim=-1)
            del scores
            out[:, first:first + rows.shape[1]] = self.groups.sum_rows(probs)
            del probs
        return out


class _MassPass:
    """The hooks of one forward pass of :func:`attention_mass` and the group sums they leave.

    Every hook only files its tensor under (layer, hook name). A layer is reduced as soon as all
    the tensors it needs are filed (``hook_rot_q``, ``hook_rot_k`` and its mechanism's
    ``row_bias_hooks``), whatever order the hooks fire in; the pass stops once every layer is.
    """

    def __init__(self, model: LensModel, prompts: list[Prompt], row_biases: dict[int, RowBiasSource | None]) -> None:
        self.row_biases = row_biases
        self.bias_hooks = {layer: tuple(source.row_bias_hooks) if source is not None else ()
                           for layer, source in row_biases.items()}
        self.needed = {layer: {_QUERY_HOOK, _KEY_HOOK, *names} for layer, names in self.bias_hooks.items()}
        self.groups = [key_groups(spans, query) for _, spans, query in prompts]
        self.reducers = [_RowReducer(groups, d_head=int(model.cfg.d_head)) for groups in self.groups]
        self.filed: dict[int, dict[str, torch.Tensor]] = {layer: {} for layer in row_biases}
        self.sums: dict[int, list[torch.Tensor]] = {}  # layer -> per prompt [head, groups.count]

    def hooks(self) -> list[tuple[str | Callable[..., Any], Callable[..., Any]]]:
        """(hook name, hook function) of every tensor the chosen layers need."""
        return [(f"blocks.{layer}.attn.{name}", partial(self.file, layer, name))
                for layer, names in self.needed.items() for name in sorted(names)]

    def file(self, layer: int, name: str, value: torch.Tensor, hook: Any = None) -> None:
        """Keep ``value`` (the hook ``name`` of ``layer``); reduce the layer once it has everything."""
        filed = self.filed[layer]
        filed[name] = value
        if filed.keys() != self.needed[layer]:
            return
        self.sums[layer] = self._reduce(layer, filed)
        filed.clear()
        if len(self.sums) == len(self.needed):
            raise _StopForward

    def _reduce(self, layer: int, filed: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """Per prompt, the layer's group sums averaged over its query rows: [head, groups.count]."""
        q, k = filed[_QUERY_HOOK], filed[_KEY_HOOK]  # [batch, pos, head, d_head]; GQA keys may be per key head
        k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)
        sums = []
        for row, reducer in enumerate(self.reducers):
            rows = q[row, slice(*reducer.query)].transpose(0, 1)  # [head, R, d_head]
            sums.append(reducer(rows, k[row].transpose(0, 1), self._bias(layer, filed, row)).mean(dim=1).cpu())
        return sums

    def _bias(self, layer: int, filed: dict[str, torch.Tensor], row: int) -> Callable[..., torch.Tensor] | None:
        """The query-row bias of sequence ``row`` in ``layer`` (None where the logits are q·k/√d alone)."""
        source = self.row_biases[layer]
        if source is None:
            return None
        return partial(source.query_rows_bias, {name: filed[name][row].float() for name in self.bias_hooks[layer]})

    def masses(self, kinds: Sequence[str]) -> list[AttentionMass]:
        """The AttentionMass of each prompt, from the sums of every layer (in layer order)."""
        layers = sorted(self.needed)
        if len(self.sums) != len(layers):
            raise RuntimeError(f"attention_mass saw every hook it needs for layers {sorted(self.sums)} of {layers}; "
                               f"the model did not run {_QUERY_HOOK}/{_KEY_HOOK} for every layer")
        return [mass_from_group_sums(torch.stack([self.sums[layer][row] for layer in layers]).numpy(), groups,
                                     layers, [kinds[layer] for layer in layers])
                for row, groups in enumerate(self.groups)]


def _row_biases(model: LensModel, layers: Sequence[int] | None) -> dict[int, RowBiasSource | None]:
    """The chosen layers (in order), each with what biases its query rows (None: the logits are q·k/√d)."""
    kinds = list(model.cfg.layer_mechanisms)
    chosen = validate_layers(layers, int(model.cfg.n_layers))
    return {layer: _row_bias_of(model.blocks[layer].attn, kinds[layer]) for layer in chosen}


def _checked_prompt(model: LensModel, ids: Any, spans: Any, query: Any, allow_beyond_context: bool) -> Prompt:
    cfg = model.cfg
    array, (named, rows) = checked_inputs(ids, spans, query, int(cfg.vocab_size),
                                          getattr(cfg, "max_position_embeddings", None), allow_beyond_context)
    return array, named, rows


def attention_mass(
    lens: HookedLensProtocol | LensModel,
    ids: Any,
    spans: Mapping[str, tuple[int, int]],
    query: tuple[int, int],
    *,
    layers: Sequence[int] | None = None,
    allow_beyond_context: bool = False,
) -> AttentionMass:
    """Attention mass per token that the query rows put on each span (RePo Table 4).

    ``lens``: a Lens (whose ``.model`` is a LensModel) or a LensModel; for an HFLens (repo_lens.hf.load_hf)
    use :func:`repo_lens.hf.attention_mass_hf`. ``ids``: token ids, 1-D or [1, T].
    ``spans``: name -> (start, end) token spans, end exclusive, disjoint, not overlapping the
    query rows (``"rest"`` is reserved). ``query``: the rows (start, end), e.g. the answer
    tokens. ``layers``: average over these layers only (default: all).

    Example:
        >>> import torch
        >>> from repo_lens.model import LensModel, ModelConfig
        >>> _ = torch.manual_seed(0)
        >>> model = LensModel(ModelConfig(family="olmo2", vocab_size=257, d_model=32, n_layers=2,
        ...                               n_heads=4, d_mlp=64, layer_mechanisms=["rope", "repo"]))
        >>> mass = attention_mass(model, list(range(40)), {"needle": (10, 15), "question": (30, 36)}, (36, 40))
        >>> sorted(mass.per_token), mass.by_layer_head["needle"].shape
        (['needle', 'question', 'rest'], (2, 4))
        >>> total = sum(mass.total(name) for name in mass.per_token) + float(mass.self_mass.mean())
        >>> round(total, 5)
        1.0
    """
    model = _model_of(lens)
    prompt = _checked_prompt(model, ids, spans, query, allow_beyond_context)
    return _masses_in_one_pass(model, [prompt], _row_biases(model, layers))[0]


def attention_mass_batch(
    lens: HookedLensProtocol | LensModel,
    prompts: Sequence[tuple[Any, Mapping[str, tuple[int, int]], tuple[int, int]]],
    *,
    batch_size: int = 8,
    layers: Sequence[int] | None = None,
    allow_beyond_context: bool = False,
) -> list[AttentionMass]:
    """:func:`attention_mass` of many prompts, ``batch_size`` per forward pass (sorted by length and
    right-padded; causal attention keeps the pads out of every query row), in input order. Each
    prompt is ``(ids, spans, query)`` with its own spans and query rows; the results equal one
    prompt at a time within 1e-5. A prompt beyond the context is measured alone.

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> model = tiny_model("repo", seed=0)  # a random 4-layer byte-level RePo model
        >>> prompts = [(list(range(40)), {"needle": (10, 15)}, (36, 40)), (list(range(9)), {"a": (0, 2)}, (7, 9))]
        >>> batched = attention_mass_batch(model, prompts, batch_size=2)
        >>> alone = attention_mass(model, *prompts[1])
        >>> abs(batched[1].per_token["a"] - alone.per_token["a"]) < 1e-6
        True
    """
    model = _model_of(lens)
    if isinstance(prompts, (str, bytes, Mapping)) or not isinstance(prompts, Iterable):
        raise InputError(f"prompts must be a list of (ids, spans, query) triples, not {type(prompts).__name__}")
    checked = []
    for number, prompt in enumerate(prompts):
        try:
            ids, spans, query = prompt
        except (TypeError, ValueError):
            raise InputError(f"prompt {number} must be a triple (ids, spans, query); got {prompt!r:.80}") from None
        checked.append(_checked_prompt(model, ids, spans, query, allow_beyond_context))
    row_biases = _row_biases(model, layers)
    masses: list[AttentionMass | None] = [None] * len(checked)
    context = getattr(model.cfg, "max_position_embeddings", None)
    for batch in length_batches([len(array) for array, _, _ in checked], batch_size, context):
        for index, mass in zip(batch, _masses_in_one_pass(model, [checked[index] for index in batch], row_biases)):
            masses[index] = mass
    return cast("list[AttentionMass]", masses)  # length_batches puts every index in exactly one batch


def _masses_in_one_pass(model: LensModel, prompts: list[Prompt],
                        row_biases: dict[int, RowBiasSource | None]) -> list[AttentionMass]:
    """The AttentionMass of each checked (ids, spans, query) prompt, in one right-padded forward pass
    over the layers ``row_biases`` names."""
    one_pass = _MassPass(model, prompts, row_biases)
    width = max(len(array) for array, _, _ in prompts)
    input_ids = torch.zeros((len(prompts), width), dtype=torch.long)  # right pads: token 0, after every query row
    for row, (array, _, _) in enumerate(prompts):
        input_ids[row, :len(array)] = torch.as_tensor(array)
    input_ids = input_ids.to(next(model.parameters()).device)
    out_of_memory = False
    try:
        with forward_lock(model), torch.inference_mode(), model.hooks(fwd_hooks=one_pass.hooks()):
            model(input_ids)
    except _StopForward:
        pass
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        out_of_memory = True  # raised below, outside this block, so the failed pass's tensors are freed first
    if out_of_memory:
        raise memory_limit_error(model, "attention mass", width,
                                 f"measure a shorter window around the spans, or fewer layers (layers=[...]; "
                                 f"this call averaged {len(row_biases)}), or fewer prompts per batch (batch_size); "
                                 "the query rows are already streamed in chunks, so the rest is the forward pass "
                                 "itself")
    return one_pass.masses(list(model.cfg.layer_mechanisms))
