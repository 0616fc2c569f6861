"""RePo's ``pe_config``, read exactly as the authors' transformers code reads it.

Their ``Olmo2Model`` (github ``SakanaAI/repo``, ``transformers/src/transformers/models/olmo2/
modeling_olmo2.py``) reads three keys of ``config.json``'s ``pe_config``:

* ``dynamic_pe_mode``: one of the 16 names of their ``DynamicPeMode``; ``"none"`` when absent;
* ``dynmaic_pe_start_layer`` (misspelled): a number, 0 when absent;
* ``dynmaic_pe_layer_ids`` (misspelled): a comma-separated string of layer indices; empty or
  absent means every layer.

A layer runs the mode iff its index is among the layer ids and ≥ the start layer: ids below the
start are dropped, ids that name no layer select nothing. The correctly spelled
``dynamic_pe_start_layer`` / ``dynamic_pe_layer_ids``, which their converter writes next to the
misspelled ones, are never read. repo_lens follows these rules exactly; wherever the file seems
to say something else it records why in :attr:`PeLayout.notes` (warned at load, kept in
``meta["pe_config_notes"]``).

What their forward does per mode (``Olmo2Attention.forward``):

* ``swigluex_multihead`` → ``repo``: z = final_map(silu(gate_map(h)) ⊙ content_map(h)), one per head;
* ``multihead_continuous`` → ``repo-multihead-continuous``: z = dynamic_map(h), one per head;
* ``continuous`` → ``repo-continuous``: z = dynamic_map(h), one per token, shared by all heads;
* ``nope`` → ``nope``: q and k are not rotated;
* ``attention``: no forward pass — the attention calls ``self.dynamic_position_encoding_attention``,
  which their ``Olmo2Attention`` does not define (AttributeError); refused;
* every other mode (``none``, ``discrete``, ``continuous_with_scale_control``, ``swiglu``,
  ``swigluex``, ``swiglu_scientific``, ``swiglu_scientific_tanh``, ``swigluex_posdim``,
  ``swigluex_filterex``, ``swigluex_posavg``, ``swigluex_sigmoid``) rotates by the integer index
  like RoPE. ``swiglu`` and ``swigluex`` still create gate/content/final maps (their test is a
  substring test, ``mode in "swigluex_multihead"``) and ``continuous_with_scale_control`` a
  ``dynamic_map``; their forward never reads them: repo_lens loads them shape-checked and unused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from repo_lens.errors import CheckpointError

START, LAYER_IDS = "dynmaic_pe_start_layer", "dynmaic_pe_layer_ids"
SPELLED_START, SPELLED_LAYER_IDS = "dynamic_pe_start_layer", "dynamic_pe_layer_ids"

# dynamic_pe_mode -> the repo_lens mechanism their forward runs in a selected layer
MODE_MECHANISMS = {
    "swigluex_multihead": "repo",
    "multihead_continuous": "repo-multihead-continuous",
    "continuous": "repo-continuous",
    "nope": "nope",
}
# modes whose forward rotates by the integer index in every layer
INTEGER_POSITION_MODES = (
    "none", "discrete", "continuous_with_scale_control", "swiglu", "swigluex", "swiglu_scientific",
    "swiglu_scientific_tanh", "swigluex_posdim", "swigluex_filterex", "swigluex_posavg", "swigluex_sigmoid",
)
NO_FORWARD_MODES = {
    "attention": (
        "the authors' Olmo2Attention calls self.dynamic_position_encoding_attention, which it does not "
        "define, so their forward fails with AttributeError at the first 'attention' layer (their training "
        "code, OLMo/olmo/model.py, rotates such layers by the integer index). There is no position to "
        "reproduce; set dynamic_pe_mode to 'none' to load this checkpoint as RoPE"
    ),
}


@dataclass(frozen=True)
class PeLayout:
    """What a ``pe_config`` makes each layer do.

    mode: the ``dynamic_pe_mode`` as their code reads it.
    layer_mechanisms: one repo_lens mechanism kind per layer.
    selected_layers: the layers their code gives the mode (they may still rotate by the index).
    notes: where their reading differs from what the file seems to say.
    unread_weights: checkpoint keys their model declares but its forward never reads, with shapes.
    """

    mode: str
    layer_mechanisms: list[str]
    selected_layers: list[int]
    notes: list[str] = field(default_factory=list)
    unread_weights: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _start_layer(value: Any, key: str) -> float:
    if isinstance(value, (int, float)):
        return value
    raise CheckpointError(
        f"pe_config {key}={value!r} is not a number; the authors' code compares it with integer layer "
        "indices (and fails on anything else): write it as an integer, e.g. 5"
    )


def _layer_ids(value: Any, key: str, n_layers: int) -> list[int] | None:
    """The ids their code parses from ``value``; None when it means every layer."""
    if not value:
        return None
    if not isinstance(value, str):
        raise CheckpointError(
            f"pe_config {key}={value!r} is not a string; the authors' code splits it on ',' (and fails "
            "on anything else): write it as '5,6,7'"
        )
    try:
        return [int(item) for item in value.split(",")]
    except ValueError:
        raise CheckpointError(
            f"pe_config {key}={value!r} is not a comma-separated list of integers; write it as '5,6,7'"
        ) from None


def _selection(start_value: Any, ids_value: Any, keys: tuple[str, str], n_layers: int):
    """(selected layers, explicit ids below the start, selected ids naming no layer, start)."""
    start = _start_layer(start_value, keys[0])
    ids = _layer_ids(ids_value, keys[1], n_layers)
    candidates = list(range(n_layers)) if ids is None else ids
    kept = [index for index in candidates if index >= start]
    dropped = sorted({index for index in candidates if index < start}) if ids is not None else []
    outside = sorted({index for index in kept if not 0 <= index < n_layers})
    return sorted({index for index in kept if 0 <= index < n_layers}), dropped, outside, start


def _spelled_notes(pe_config: dict[str, Any], layers: list[int], n_layers: int) -> list[str]:
    spelled = [key for key in (SPELLED_START, SPELLED_LAYER_IDS) if key in pe_config]
    if not spelled:
        return []
    try:
        as_spelled, *_ = _selection(
            pe_config.get(SPELLED_START, pe_config.get(START, 0)),
            pe_config.get(SPELLED_LAYER_IDS, pe_config.get(LAYER_IDS)),
            (SPELLED_START, SPELLED_LAYER_IDS), n_layers,
        )
    except CheckpointError:
        as_spelled = None
    if as_spelled == layers:
        return []
    values = ", ".join(f"{key}={pe_config[key]!r}" for key in spelled)
    would = f"would select layers {as_spelled}" if as_spelled is not None else "are malformed"
    return [f"pe_config's correctly spelled {values} {would}, but the authors' code reads only the "
            f"misspelled {START} / {LAYER_IDS} and selects layers {layers}; repo_lens follows their code"]


def _unread_weights(mode: str, layers: list[int], d_model: int, n_heads: int) -> dict[str, tuple[int, ...]]:
    if mode in ("swiglu", "swigluex"):
        width = d_model // 8
        shapes = {"gate_map": (width, d_model), "content_map": (width, d_model), "final_map": (n_heads, width)}
    elif mode == "continuous_with_scale_control":
        shapes = {"dynamic_map": (1, d_model)}
    else:
        return {}
    return {f"model.layers.{layer}.self_attn.{name}.weight": shape
            for layer in layers for name, shape in shapes.items()}


def read_pe_config(pe_config: dict[str, Any] | None, n_layers: int, d_model: int, n_heads: int,
                   base_mechanism: str = "rope") -> PeLayout:
    """Each layer's mechanism under ``pe_config``, read exactly as the authors' code reads it.

    Example (the published layout, then a config with only the correctly spelled keys):
        >>> published = {"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 2,
        ...              "dynmaic_pe_start_layer": 2, "dynamic_pe_layer_ids": "", "dynmaic_pe_layer_ids": ""}
        >>> read_pe_config(published, n_layers=4, d_model=64, n_heads=4).layer_mechanisms
        ['rope', 'rope', 'repo', 'repo']
        >>> spelled = read_pe_config({"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 2},
        ...                          n_layers=4, d_model=64, n_heads=4)
        >>> spelled.layer_mechanisms, len(spelled.notes)
        (['repo', 'repo', 'repo', 'repo'], 1)
    """
    if pe_config is None:
        pe_config = {}
    if not isinstance(pe_config, dict):
        raise CheckpointError(f"pe_config must be a JSON object, found {type(pe_config).__name__}")
    mode = pe_config.get("dynamic_pe_mode", "none")
    if isinstance(mode, str) and mode in NO_FORWARD_MODES:
        raise CheckpointError(f"dynamic_pe_mode {mode!r} cannot be loaded: {NO_FORWARD_MODES[mode]}")
    if not isinstance(mode, str) or (mode not in MODE_MECHANISMS and mode not in INTEGER_POSITION_MODES):
        raise CheckpointError(
            f"unknown dynamic_pe_mode {mode!r} in pe_config; supported: {', '.join(MODE_MECHANISMS)}, "
            f"and, rotating by the integer index like the authors' code: {', '.join(INTEGER_POSITION_MODES)}"
        )
    layers, dropped, outside, start = _selection(
        pe_config.get(START, 0), pe_config.get(LAYER_IDS), (START, LAYER_IDS), n_layers)
    if mode == "none":
        return PeLayout(mode, [base_mechanism] * n_layers, layers)
    notes = _spelled_notes(pe_config, layers, n_layers)
    if dropped:
        notes.append(f"{LAYER_IDS} names layers {dropped} below {START}={start}; the authors' code drops them")
    if outside:
        notes.append(f"{LAYER_IDS} names {outside}, which are not layers of this {n_layers}-layer model "
                     f"(0..{n_layers - 1}); the authors' code selects nothing for them")
    if not layers:
        notes.append(f"no layer runs dynamic_pe_mode {mode!r} (start {start}, {n_layers} layers)")
    mechanism = MODE_MECHANISMS.get(mode, base_mechanism)
    unread = _unread_weights(mode, layers, d_model, n_heads)
    if mode not in MODE_MECHANISMS and layers:
        notes.append(
            f"dynamic_pe_mode {mode!r}: the authors' forward rotates by the integer index for this mode, so "
            f"layers {layers} run as {base_mechanism}"
            + ("; the position maps their model declares there are loaded (shape-checked) and unused" if unread else "")
        )
    kinds = [mechanism if layer in layers else base_mechanism for layer in range(n_layers)]
    return PeLayout(mode, kinds, layers, notes, unread)
