"""What every lens' attention mass shares: the input checks, the key groups and the result.

:func:`repo_lens.analysis.attention_mass` (the hookable model, query rows only) and
:func:`repo_lens.hf.attention_mass_hf` (any Hugging Face model, through its eager attention
weights) both check their input with :func:`checked_inputs` and :func:`validate_layers`, sum
each query row's attention probabilities per key group (:func:`key_groups`,
:meth:`KeyGroups.sum_rows`) and turn the sums averaged over the rows into an
:class:`AttentionMass` with :func:`mass_from_group_sums`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from repo_lens.errors import InputError
from repo_lens.inputs import fit_to_context, token_ids
from repo_lens.validation import check_index

REST = "rest"


@dataclass
class AttentionMass:
    """Result of :func:`repo_lens.analysis.attention_mass`.

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
        """Number of groups: the spans, ``rest`` and the query rows' own keys."""
        return len(self.names) + 1

    def sum_rows(self, probs: torch.Tensor) -> torch.Tensor:
        """Attention probabilities [..., keys] (keys 0 .. query end − 1) summed per group: [..., count], fp32.

        Example:
            >>> groups = key_groups({"a": (0, 2)}, (3, 4))
            >>> groups.sum_rows(torch.tensor([[0.25, 0.25, 0.125, 0.375]])).tolist()
            [[0.5, 0.125, 0.375]]
        """
        sums = torch.zeros(*probs.shape[:-1], self.count, dtype=torch.float32, device=probs.device)
        return sums.index_add_(-1, self.index.to(probs.device), probs.float())


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


def mass_from_group_sums(sums: Any, groups: KeyGroups, layers: Sequence[int],
                         layer_kinds: Sequence[str]) -> AttentionMass:
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
    """Checked ``(spans, query)`` for :func:`repo_lens.analysis.attention_mass`: integer pairs, non-empty,
    within the ``n_tokens`` ids, spans disjoint and apart from the query rows, ``rest`` not used as a name.

    Example:
        >>> validate_spans({"needle": (1, 3)}, (5, 7), n_tokens=7)
        ({'needle': (1, 3)}, (5, 7))
    """
    q_start, q_end = _as_pair(query, "query")
    if not 0 <= q_start < q_end <= n_tokens:
        raise InputError(
            f"query rows {(q_start, q_end)} must be non-empty and within [0, {n_tokens}) "
            f"(0 <= start < end <= {n_tokens}, end exclusive); e.g. the answer tokens"
        )
    if not isinstance(spans, Mapping):
        raise InputError(f"spans must be a dict name -> (start, end); got {type(spans).__name__}")
    checked = {name: _checked_span(name, value, (q_start, q_end), n_tokens) for name, value in spans.items()}
    ordered = sorted(checked.items(), key=lambda item: item[1])
    for (name_a, (_, end_a)), (name_b, (start_b, end_b)) in zip(ordered, ordered[1:]):
        if start_b < end_a:
            raise InputError(
                f"spans {name_a!r} = {checked[name_a]} and {name_b!r} = {(start_b, end_b)} overlap; "
                "spans must be disjoint (pick non-overlapping spans, e.g. the value OR the whole needle)"
            )
    return checked, (q_start, q_end)


def _checked_span(name: Any, value: Any, query: tuple[int, int], n_tokens: int) -> tuple[int, int]:
    """One span of :func:`validate_spans`: a named, non-empty pair within the ids, apart from the query rows."""
    if not isinstance(name, str) or not name:
        raise InputError(f"span names must be non-empty strings; got {name!r}")
    if name == REST:
        raise InputError(f"span name {REST!r} is reserved (every other key before the query rows); rename your span")
    start, end = _as_pair(value, f"span {name!r}")
    if not 0 <= start < end <= n_tokens:
        raise InputError(
            f"span {name!r} = {(start, end)} must be non-empty and within [0, {n_tokens}) "
            f"(0 <= start < end <= {n_tokens}, end exclusive)"
        )
    if start < query[1] and query[0] < end:
        raise InputError(
            f"span {name!r} = {(start, end)} overlaps the query rows {query}; "
            "end the span before the query rows start (keys inside the query rows belong to no span)"
        )
    return start, end


def checked_inputs(ids: Any, spans: Mapping[str, Any], query: Any, vocab_size: int, context_length: int | None,
                   allow_beyond_context: bool) -> tuple[np.ndarray, tuple[dict[str, tuple[int, int]], tuple[int, int]]]:
    """Token ids (int64, 1-D) within the vocabulary and the context, and the checked spans and query
    rows (:func:`validate_spans`): the input checks of every lens' attention mass."""
    checked = token_ids(ids, None, vocab_size)
    fit_to_context(checked, context_length, allow_beyond_context=allow_beyond_context, offer_truncation=False)
    return np.asarray(checked, dtype=np.int64), validate_spans(spans, query, len(checked))


def validate_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """The layers to average over, sorted and distinct: all for None, else each checked by
    :func:`repo_lens.validation.check_index` (negatives count from the end).

    Example:
        >>> validate_layers(None, 3), validate_layers([-1, 0, 2], 3)
        ([0, 1, 2], [0, 2])
    """
    if layers is None:
        return list(range(n_layers))
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise InputError(f"layers must be a list of layer indices (or None for all), not {layers!r:.40}; "
                         f"e.g. [0, {n_layers - 1}]")
    chosen = sorted({check_index(layer, n_layers, "layer", owner="model") for layer in layers})
    if not chosen:
        raise InputError(f"layers is empty; pass None (all layers) or indices in 0..{n_layers - 1}")
    return chosen
