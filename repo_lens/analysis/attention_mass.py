"""Attention mass per token on named spans, from a set of query rows (RePo §5.1, Table 4).

For query rows ``query=(start, end)`` (e.g. the generated answer tokens of a NIAH prompt),
every row's attention probabilities are summed over each named span's keys and divided by
the span's length ("mass per token"), then averaged over rows (``by_layer_head``) and over
layers and heads (``per_token``). The extra span ``rest`` holds every other key before
``query.start``; keys inside the query rows count in no span (their total is ``self_mass``).

Only the query rows of the attention pattern are ever computed: in one forward pass, hooks
take the query rows of ``hook_q`` and the keys of ``hook_k`` (both after rotary, so this
holds for every rotary mechanism and GQA alike; a mechanism that biases the logits gives the bias
of the query rows only, through its ``query_rows_bias``), compute softmax(q·kᵀ/√d_head + bias +
causal mask) in fp32 for at most ``_ELEMENT_BUDGET`` scores at a time, and reduce them to per-span
sums at once. Memory is O(heads · rows · T) in bounded chunks, never T × T. The forward
pass stops after the last layer's keys, so the MLPs of that layer and the unembedding are
skipped.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from repo_lens.capture import forward_lock, is_out_of_memory, memory_limit_error
from repo_lens.errors import InputError
from repo_lens.inputs import fit_to_context, token_ids
from repo_lens.protocol import length_batches
from repo_lens.validation import check_index
from repo_lens.model.registry import mechanism_traits

REST = "rest"
# Largest number of fp32 scores materialised at once (heads × rows × keys): 8 MiB.
_ELEMENT_BUDGET = 1 << 21


@dataclass
class AttentionMass:
    """Result of :func:`attention_mass`.

    ``per_token[name]``: mass per token on span ``name`` (incl. ``"rest"``), averaged over
    query rows, heads and layers. ``by_layer_head[name]``: the same before averaging over
    layers and heads, shape (n_layers_used, n_heads). ``span_lengths[name]``: tokens in the
    span. ``self_mass``: (n_layers_used, n_heads) total (not per-token) mass the rows put on
    keys inside the query rows. Per row, Σ_name per_token × length + self mass = 1 (spans
    after the query get no mass). ``per_token["rest"]`` is NaN when no key is left for it.
    """

    per_token: dict[str, float]
    by_layer_head: dict[str, np.ndarray]
    span_lengths: dict[str, int]
    query: tuple[int, int]
    self_mass: np.ndarray
    layers: list[int]
    layer_kinds: list[str] = field(default_factory=list)

    def total(self, name: str) -> float:
        """Mass on the whole span (per-token mass × length), averaged over rows, heads, layers."""
        return float(self.per_token[name] * self.span_lengths[name])


@dataclass(frozen=True)
class KeyGroups:
    """The group of every key the query rows can see (keys 0 .. query end − 1).

    ``index[key]`` is i for the i-th named span, ``len(spans)`` (``rest``) for any other key
    before the query rows and :attr:`own` for keys inside the query rows. ``names``: the spans,
    then ``rest``; ``lengths``: tokens in each of them.
    """

    names: list[str]
    index: torch.Tensor
    lengths: dict[str, int]
    query: tuple[int, int]

    @property
    def own(self) -> int:
        """Group of the keys inside the query rows (counted in no span)."""
        return len(self.names)

    @property
    def count(self) -> int:
        return len(self.names) + 1


def key_groups(spans: Mapping[str, tuple[int, int]], query: tuple[int, int]) -> KeyGroups:
    """Group keys by span for checked ``spans`` and ``query`` (:func:`validate_spans`).

    Example:
        >>> groups = key_groups({"needle": (1, 3)}, (5, 7))
        >>> groups.index.tolist(), groups.names, groups.lengths
        ([1, 0, 0, 1, 1, 2, 2], ['needle', 'rest'], {'needle': 2, 'rest': 3})
    """
    q_start, q_end = query
    index = torch.full((q_end,), len(spans), dtype=torch.long)
    index[q_start:q_end] = len(spans) + 1
    lengths = {}
    for group, (name, (start, end)) in enumerate(spans.items()):
        index[start:min(end, q_end)] = group
        lengths[name] = end - start
    before_query = sum(min(end, q_start) - min(start, q_start) for start, end in spans.values())
    lengths[REST] = q_start - before_query
    return KeyGroups(names=[*spans, REST], index=index, lengths=lengths, query=(q_start, q_end))


def mass_from_group_sums(sums: Any, groups: KeyGroups, layers: Sequence[int], layer_kinds: Sequence[str]) -> AttentionMass:
    """The :class:`AttentionMass` of attention probabilities summed per key group and averaged over
    the query rows: ``sums`` (len(layers), n_heads, groups.count), any lens.

    Example:
        >>> groups = key_groups({"needle": (0, 2)}, (4, 5))
        >>> sums = np.array([[[0.5, 0.3, 0.2]]])   # one layer, one head: needle, rest, own row
        >>> mass = mass_from_group_sums(sums, groups, [0], ["rope"])
        >>> mass.per_token, mass.self_mass.tolist()
        ({'needle': 0.25, 'rest': 0.15}, [[0.2]])
    """
    stacked = np.asarray(sums, dtype=np.float64)
    by_layer_head: dict[str, np.ndarray] = {}
    per_token: dict[str, float] = {}
    for group, name in enumerate(groups.names):
        length = groups.lengths[name]
        values = stacked[:, :, group] / length if length > 0 else np.full(stacked.shape[:2], np.nan)
        by_layer_head[name] = values
        per_token[name] = float(values.mean())
    return AttentionMass(per_token=per_token, by_layer_head=by_layer_head, span_lengths=dict(groups.lengths),
                         query=groups.query, self_mass=stacked[:, :, groups.own], layers=list(layers),
                         layer_kinds=list(layer_kinds))


class _StopForward(Exception):
    """Raised by the last needed hook: the rest of the forward pass is not needed."""


def _model_of(lens_or_model: Any) -> Any:
    model = getattr(lens_or_model, "model", lens_or_model)
    if not hasattr(model, "cfg") or not hasattr(model, "hooks"):
        raise InputError(
            f"attention_mass needs a Lens (with .model) or a LensModel; got {type(lens_or_model).__name__}"
        )
    return model


def _as_pair(value: Any, what: str) -> tuple[int, int]:
    try:
        start, end = value
        if isinstance(start, bool) or isinstance(end, bool):
            raise TypeError
        pair = (operator.index(start), operator.index(end))  # 2.0 or np.float64(1.0) are refused, not rounded
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a pair of integers (start, end), end exclusive; got {value!r}") from None
    return pair


def validate_spans(spans: Mapping[str, Any], query: Any,
                   n_tokens: int) -> tuple[dict[str, tuple[int, int]], tuple[int, int]]:
    """Checked ``(spans, query)`` for :func:`attention_mass`: integer pairs, non-empty, within the
    ``n_tokens`` ids, spans disjoint and apart from the query rows, ``rest`` not used as a name."""
    q_start, q_end = _as_pair(query, "query")
    if not 0 <= q_start < q_end <= n_tokens:
        raise InputError(
            f"query rows {(q_start, q_end)} must be non-empty and within [0, {n_tokens}) "
            f"(0 <= start < end <= {n_tokens}, end exclusive); e.g. the answer tokens"
        )
    if not isinstance(spans, Mapping):
        raise InputError(f"spans must be a dict name -> (start, end); got {type(spans).__name__}")
    checked: dict[str, tuple[int, int]] = {}
    for name, value in spans.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"span names must be non-empty strings; got {name!r}")
        if name == REST:
            raise InputError(
                f"span name {REST!r} is reserved (every other key before the query rows); rename your span"
            )
        start, end = _as_pair(value, f"span {name!r}")
        if not 0 <= start < end <= n_tokens:
            raise InputError(
                f"span {name!r} = {(start, end)} must be non-empty and within [0, {n_tokens}) "
                f"(0 <= start < end <= {n_tokens}, end exclusive)"
            )
        if start < q_end and q_start < end:
            raise InputError(
                f"span {name!r} = {(start, end)} overlaps the query rows {(q_start, q_end)}; "
                "end the span before the query rows start (keys inside the query rows belong to no span)"
            )
        checked[name] = (start, end)
    ordered = sorted(checked.items(), key=lambda item: item[1])
    for (name_a, (_, end_a)), (name_b, (start_b, end_b)) in zip(ordered, ordered[1:]):
        if start_b < end_a:
            raise InputError(
                f"spans {name_a!r} = {checked[name_a]} and {name_b!r} = {(start_b, end_b)} overlap; "
                "spans must be disjoint (pick non-overlapping spans, e.g. the value OR the whole needle)"
            )
    return checked, (q_start, q_end)


def checked_inputs(ids: Any, spans: Mapping[str, Any], query: Any, vocab_size: int, context_length: int | None,
                   allow_beyond_context: bool) -> tuple[np.ndarray, tuple[dict[str, tuple[int, int]], tuple[int, int]]]:
    """Token ids (int64, 1-D) within the vocabulary and the context, and the checked spans and query
    rows (:func:`validate_spans`): the input checks of every lens' attention mass."""
    checked = token_ids(ids, None, vocab_size)
    fit_to_context(checked, context_length, allow_beyond_context=allow_beyond_context, offer_truncation=False)
    return np.asarray(checked, dtype=np.int64), validate_spans(spans, query, len(checked))


def _row_bias_of(mechanism: Any, kind: str) -> Any:
    """The mechanism's ``query_rows_bias`` if its logits are more than q·k/√d, else None. A biasing
    mechanism without one is refused rather than given wrong numbers."""
    if not mechanism_traits(kind).biases_logits:
        return None
    row_bias = getattr(mechanism, "query_rows_bias", None)
    if row_bias is None:
        raise InputError(
            f"attention_mass recomputes attention row by row and cannot bias the rows of layers of kind {kind!r} "
            "(its mechanism has no query_rows_bias); restrict `layers` to the other layers"
        )
    return row_bias


def validate_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """The layers to average over, sorted and distinct: all for None, else each checked by
    :func:`repo_lens.validation.check_index` (negatives count from the end)."""
    if layers is None:
        return list(range(n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise InputError(f"layers must be a list of layer indices (or None for all), not {layers!r:.40}; "
                         f"e.g. [0, {n_layers - 1}]")
    chosen = sorted({check_index(layer, n_layers, "layer", owner="model") for layer in layers})
    if not chosen:
        raise InputError(f"layers is empty; pass None (all layers) or indices in 0..{n_layers - 1}")
    return chosen


class _RowReducer:
    """Reduces the query rows' attention of one layer to per-group sums, chunk by chunk."""

    def __init__(self, groups: torch.Tensor, n_groups: int, query: tuple[int, int], d_head: int) -> None:
        # groups[key] in 0..n_groups-1 for keys in a named span or `rest`; n_groups = self (query rows);
        # n_groups + 1 = after the query (never attended). Keys beyond query.end are not needed.
        self.groups = groups
        self.n_groups = n_groups
        self.query = query
        self.scale = 1.0 / math.sqrt(d_head)

    def __call__(self, q_rows: torch.Tensor, keys: torch.Tensor, bias=None) -> torch.Tensor:
        """q_rows [head, R, d_head], keys [head, T, d_head] -> sums [head, R, n_groups + 1] (fp32).
        ``bias(rows, masked_scores, row_index, key_index)`` -> [head, r, keys] is added to the logits."""
        q_start, q_end = self.query
        keys = keys[:, :q_end]  # a view: the query rows see nothing later
        n_heads, n_rows, _ = q_rows.shape
        n_keys = keys.shape[1]
        keys32 = keys.float()
        groups = self.groups.to(keys.device)
        out = torch.zeros(n_heads, n_rows, self.n_groups + 1, dtype=torch.float32, device=keys.device)
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
            out[:, first:first + rows.shape[1]].index_add_(-1, groups, probs)
            del probs
        return out


def attention_mass(
    lens: Any,
    ids: Any,
    spans: Mapping[str, tuple[int, int]],
    query: tuple[int, int],
    *,
    layers: Sequence[int] | None = None,
    allow_beyond_context: bool = False,
) -> AttentionMass:
    """Attention mass per token that the query rows put on each span (RePo Table 4).

    ``lens``: a Lens (``.model``) or a LensModel. ``ids``: token ids, 1-D or [1, T].
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
    cfg = model.cfg
    array, (named, (q_start, q_end)) = checked_inputs(ids, spans, query, int(cfg.vocab_size),
                                                      getattr(cfg, "max_position_embeddings", None),
                                                      allow_beyond_context)
    kinds = list(cfg.layer_mechanisms)
    chosen = validate_layers(layers, int(cfg.n_layers))
    row_biases = {layer: _row_bias_of(model.blocks[layer].attn.positions, kinds[layer]) for layer in chosen}
    return _masses_in_one_pass(model, [(array, named, (q_start, q_end))], chosen, row_biases)[0]


def attention_mass_batch(
    lens: Any,
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
    cfg = model.cfg
    context = getattr(cfg, "max_position_embeddings", None)
    if isinstance(prompts, (str, bytes, Mapping)) or not isinstance(prompts, Iterable):
        raise InputError(f"prompts must be a list of (ids, spans, query) triples, not {type(prompts).__name__}")
    checked = []
    for number, prompt in enumerate(prompts):
        try:
            ids, spans, query = prompt
        except (TypeError, ValueError):
            raise InputError(f"prompt {number} must be a triple (ids, spans, query); got {prompt!r:.80}") from None
        array, (named, rows) = checked_inputs(ids, spans, query, int(cfg.vocab_size), context, allow_beyond_context)
        checked.append((array, named, rows))
    kinds = list(cfg.layer_mechanisms)
    chosen = validate_layers(layers, int(cfg.n_layers))
    row_biases = {layer: _row_bias_of(model.blocks[layer].attn.positions, kinds[layer]) for layer in chosen}
    masses: list[AttentionMass | None] = [None] * len(checked)
    for batch in length_batches([len(array) for array, _, _ in checked], batch_size, context):
        for index, mass in zip(batch, _masses_in_one_pass(model, [checked[index] for index in batch], chosen,
                                                          row_biases)):
            masses[index] = mass
    return masses


def _masses_in_one_pass(model: Any, prompts: list[tuple[np.ndarray, dict[str, tuple[int, int]], tuple[int, int]]],
                        chosen: list[int], row_biases: dict[int, Any]) -> list[AttentionMass]:
    """The AttentionMass of each checked (ids, spans, query) prompt, in one right-padded forward pass."""
    cfg = model.cfg
    kinds = list(cfg.layer_mechanisms)
    mechanisms = {layer: model.blocks[layer].attn.positions for layer in chosen}
    groups = [key_groups(named, query) for _, named, query in prompts]
    reducers = [_RowReducer(group.index, n_groups=group.own, query=group.query, d_head=int(cfg.d_head))
                for group in groups]

    sums: dict[int, list[torch.Tensor]] = {}
    pending: dict[int, torch.Tensor] = {}
    last = chosen[-1]

    def keep_rows(layer: int):
        def hook(q: torch.Tensor, hook: Any) -> None:
            pending[layer] = q  # [batch, head, pos, d_head]; each prompt's rows are taken in reduce_rows

        return hook

    hooked: dict[int, dict[str, torch.Tensor]] = {layer: {} for layer in chosen}

    def keep_hooked(layer: int, name: str):
        def hook(value: torch.Tensor, hook: Any) -> None:
            hooked[layer][name] = value.float()  # every sequence, e.g. hook_pos [batch, head, T]

        return hook

    def bias_of(layer: int, row: int):
        row_bias = row_biases[layer]
        if row_bias is None:
            return None
        return lambda rows, scores, row_index, key_index: row_bias(
            {name: value[row] for name, value in hooked[layer].items()}, rows, scores, row_index, key_index)

    def reduce_rows(layer: int):
        def hook(k: torch.Tensor, hook: Any) -> None:
            q = pending.pop(layer)
            # per prompt, group sums averaged over its rows: [head, n_groups + 1]
            sums[layer] = [reducer(q[row, :, slice(*reducer.query)], k[row], bias_of(layer, row)).mean(dim=1).cpu()
                           for row, reducer in enumerate(reducers)]
            if layer == last:
                raise _StopForward

        return hook

    fwd_hooks = []
    for layer in chosen:
        if row_biases[layer] is not None:
            fwd_hooks += [(f"blocks.{layer}.attn.{name}", keep_hooked(layer, name))
                          for name in mechanisms[layer].row_bias_hooks]
        fwd_hooks.append((f"blocks.{layer}.attn.hook_q", keep_rows(layer)))
        fwd_hooks.append((f"blocks.{layer}.attn.hook_k", reduce_rows(layer)))
    device = next(model.parameters()).device
    width = max(len(array) for array, _, _ in prompts)
    input_ids = torch.zeros((len(prompts), width), dtype=torch.long)  # right pads: token 0, after every query row
    for row, (array, _, _) in enumerate(prompts):
        input_ids[row, :len(array)] = torch.as_tensor(array)
    input_ids = input_ids.to(device)
    out_of_memory = False
    try:
        with forward_lock(model), torch.inference_mode(), model.hooks(fwd_hooks=fwd_hooks):
            model(input_ids)
    except _StopForward:
        pass
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        out_of_memory = True  # raised below, outside this block, so the failed pass's tensors are freed first
    if out_of_memory:
        raise memory_limit_error(model, "attention mass", int(input_ids.shape[1]),
                                 f"measure a shorter window around the spans, or fewer layers (layers=[...]; "
                                 f"this call averaged {len(chosen)}), or fewer prompts per batch (batch_size); "
                                 "the query rows are already streamed in chunks, so the rest is the forward pass "
                                 "itself")
    if len(sums) != len(chosen):
        raise RuntimeError(
            f"attention_mass saw hooks for layers {sorted(sums)} of {chosen}; the model did not run "
            "hook_q/hook_k for every layer"
        )
    masses = []
    for row, group in enumerate(groups):
        stacked = torch.stack([sums[layer][row] for layer in chosen]).numpy()  # [L, H, groups]
        masses.append(mass_from_group_sums(stacked, group, chosen, [kinds[layer] for layer in chosen]))
    return masses
