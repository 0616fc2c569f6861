"""What :func:`repo_lens.analysis.score_decomposition` reads of one attention layer: the rotated queries
of the rows asked for and every key before them, how the layer rotated them, and the bias it adds.

``native_view`` runs a repo_lens model (its own attention, or the GRAPE, FoX and CoPE authors' attention)
up to the layer with hooks on ``hook_rot_q``, ``hook_rot_k``, ``hook_pos`` and whatever the layer's
mechanism reads for its bias (``row_bias_hooks``; in a model with a decay, the layer's ``hook_decay``),
and stops the forward pass once it has them.
``hf_view`` reads a Hugging Face model's layer through nnsight: its ``apply_rotary_pos_emb`` call
(queries and keys before and after the rotation, cos and sin) and its eager attention weights of the rows,
and checks that the rotation and the pattern are what repo_lens recomputes from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from repo_lens.capture import forward_lock, is_out_of_memory, memory_limit_error
from repo_lens.errors import InputError
from repo_lens.model.decay import layer_decay_rows
from repo_lens.model.registry import mechanism_traits, position_edit
from repo_lens.protocol import LensProtocol
from repo_lens.validation import require_lens_model

if TYPE_CHECKING:
    from repo_lens.hf.model import HFLens

__all__ = ["REFERENCES", "LayerView", "Rotation", "RowBias", "hf_view", "native_view", "reference_positions"]

REFERENCES = ("integer", "constant")  # the named reference positions (else an array, or None for none)
_QUERY_HOOK, _KEY_HOOK, _POSITION_HOOK = "hook_rot_q", "hook_rot_k", "hook_pos"

RowBias = Callable[..., torch.Tensor]  # (rows [head, r, d], masked scores [head, r, K], row_index, key_index) -> bias


class _StopForward(Exception):
    """Raised once the layer's hooks have given everything the decomposition needs."""


@dataclass(frozen=True)
class Rotation:
    """How a layer rotates q and k: NeoX rotate-half pairs (b, b + n_pairs) of the first 2·n_pairs channels,
    by sign · position · frequencies[head, b] (angles in fp32, as the layers compute them)."""

    frequencies: torch.Tensor  # [head, n_pairs] fp32, one row per query head
    sign: float

    @property
    def n_pairs(self) -> int:
        return int(self.frequencies.shape[1])

    def rotate(self, x: torch.Tensor, positions: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """x [h, n, d] (heads ``heads``) rotated at ``positions`` [h, n], in x's dtype.

        >>> rotation = Rotation(torch.tensor([[math.pi / 2]]), 1.0)  # one head, one band a quarter turn per unit
        >>> (rotation.rotate(torch.tensor([[[1.0, 0.0]]]), torch.tensor([[1.0]]), torch.tensor([0])).round() + 0.0).tolist()
        [[[0.0, 1.0]]]
        """
        angles = self.sign * positions.float()[..., None] * self.frequencies[heads].to(positions.device)[:, None, :]
        angles = angles.to(x.dtype)
        cos, sin = angles.cos(), angles.sin()
        pairs = self.n_pairs
        first, second, rest = x[..., :pairs], x[..., pairs:2 * pairs], x[..., 2 * pairs:]
        return torch.cat((first * cos - second * sin, second * cos + first * sin, rest), dim=-1)


@dataclass
class LayerView:
    """One layer of one sequence as the decomposition needs it (tensors on the model's device)."""

    kind: str
    q_rows: torch.Tensor  # [head, R, d]: the rotated queries of the query rows (every query head)
    keys: torch.Tensor  # [head, K, d]: the rotated keys 0..K−1, one per query head
    scale: float
    rotation: Rotation | None  # None: the layer rotates nothing
    rotated_at: torch.Tensor | None  # [head, K] the positions the layer rotated by (None: no rotation)
    row_bias: RowBias | None  # the mechanism's query-row bias (None: the score is q·k · scale)
    reference_bias: RowBias | None  # the query-row bias at the reference positions (None: no bias, or no reference)
    rotary_role: bool  # the mechanism's positions are what the layer rotates by
    kept_bias: RowBias | None = None  # a bias no reference changes: the model's decay (None: none)


def lens_dtype(parameter: torch.Tensor) -> torch.dtype:
    """float64 for a float64 model, else float32 (the dtype the layers score in)."""
    return torch.float64 if parameter.dtype == torch.float64 else torch.float32


def _native_rotation(attn: Any, layer: int, kind: str, n_tokens: int) -> tuple[Rotation | None, bool]:
    """(the rotation of a repo_lens attention layer, whether it rotates at ``hook_pos``) or an InputError for
    one whose rotation cannot be split into bands."""
    from repo_lens.model.attention import Attention
    from repo_lens.model.authors.attention import AuthorsAttention
    from repo_lens.model.authors.cope_attention import CopeAttention

    role = mechanism_traits(kind).role
    n_heads = int(attn.n_heads)
    if isinstance(attn, Attention):
        if role != "rotary":
            return None, False
        inv_freq = attn.rope.inv_freq_at(n_tokens, attn.inv_freq).float()
        return Rotation(inv_freq[None, :].expand(n_heads, -1), 1.0), True
    if isinstance(attn, AuthorsAttention):
        if attn.rotary is None:
            return None, False
        options = attn.options
        if options.qk_norm != "none" and not options.qk_norm_before_rotation:
            raise InputError(
                f"layer {layer} normalises q and k after rotating them (its checkpoint's qk-norm, with a weight per "
                "channel), so its score is no sum of rotated bands and depends on more than position differences; "
                "score_decomposition cannot split it into content and position. Layers that normalise before "
                "rotating, or not at all, can be decomposed"
            )
        frequencies = attn.rotary(attn.q_proj.weight.device).float().expand(n_heads, -1)
        return Rotation(frequencies, 1.0 if options.neox_rotation else -1.0), role == "rotary"
    if isinstance(attn, CopeAttention):
        return None, False
    raise InputError(f"layer {layer}'s attention ({type(attn).__name__}) is not one score_decomposition knows how "
                     "to read (repo_lens' own attention, or the GRAPE, FoX or CoPE authors' attention)")


def _native_reference_bias(model: Any, layer: int, kind: str, mechanism: Any, row_bias: RowBias,
                           hooked: dict[str, torch.Tensor], reference: str | torch.Tensor) -> RowBias:
    """For a biasing layer, the query-row bias at the reference positions (``hooked`` is filled by the forward
    pass later). Key-minus-query biases take any positions; biases that depend on the query take "integer" and
    "constant" as the registry's edit defines them; learned relative logits take their own integer distances."""
    if mechanism_traits(kind).role == "additive" and hasattr(mechanism, "logit_bias"):
        return partial(_key_minus_query_bias, mechanism, reference)
    if not isinstance(reference, str):
        raise InputError(
            f"layer {layer} ({kind!r}) biases each query's scores by positions that depend on the query; "
            f"reference positions there can be {' or '.join(repr(name) for name in REFERENCES)}, not an array")
    if mechanism_traits(kind).edit:
        return partial(_edited_bias, model, layer, position_edit(kind), row_bias, hooked, reference)
    if hasattr(mechanism, "rows_bias"):  # a table per integer distance: integer positions are its own
        return partial(_distance_bias, mechanism, reference)
    raise InputError(f"layer {layer} ({kind!r}) declares no way to put its positions at reference values "
                     "(the registry's 'edit' trait); pass reference=None")


def _key_minus_query_bias(mechanism: Any, reference: str | torch.Tensor, rows: torch.Tensor, scores: torch.Tensor,
                          row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
    positions = reference_positions(reference, rows.shape[0], int(key_index.numel()), rows.device)
    return mechanism.logit_bias(positions[:, row_index].to(rows.dtype), positions[:, key_index].to(rows.dtype))


def _distance_bias(mechanism: Any, reference: str, rows: torch.Tensor, scores: torch.Tensor, row_index: torch.Tensor,
                   key_index: torch.Tensor) -> torch.Tensor:
    if reference == "constant":
        row_index, key_index = torch.zeros_like(row_index), torch.zeros_like(key_index)
    return mechanism.rows_bias(rows, row_index, key_index)


def _edited_bias(model: Any, layer: int, edit: Any, row_bias: RowBias, hooked: dict[str, torch.Tensor],
                 reference: str, rows: torch.Tensor, scores: torch.Tensor, row_index: torch.Tensor,
                 key_index: torch.Tensor) -> torch.Tensor:
    """The bias with the mechanism's pairwise quantity (the registry's edit hook) at its integer or constant
    value, as :func:`repo_lens.interventions.ablate` sets it."""
    value = edit.integer if reference == "integer" else edit.constant
    local = edit.hook.removeprefix("attn.")
    if local in hooked:
        return row_bias({**hooked, local: torch.full_like(hooked[local], value)}, rows, scores, row_index, key_index)
    fired: list[bool] = []

    def replace(tensor: torch.Tensor, hook: Any) -> torch.Tensor:
        fired.append(True)
        return torch.full_like(tensor, value)

    with model.hooks(fwd_hooks=[(f"blocks.{layer}.{edit.hook}", replace)]):
        bias = row_bias(hooked, rows, scores, row_index, key_index)
    if not fired:
        raise InputError(f"layer {layer}'s bias did not pass through {edit.hook}, where its reference positions "
                         "would be set; pass reference=None")
    return bias


def native_view(lens: LensProtocol, ids: list[int], layer: int, rows: list[int], n_keys: int, dtype: torch.dtype,
                reference: str | torch.Tensor | None) -> LayerView:
    """Run the forward pass up to ``layer`` and read what the decomposition needs from its hooks: the query
    ``rows`` and the keys 0..n_keys−1 (a reference the layer cannot take is refused before the forward pass)."""
    model = require_lens_model(lens, "score_decomposition")
    attn = model.blocks[layer].attn
    kind = str(model.cfg.layer_mechanisms[layer])
    traits = mechanism_traits(kind)
    rotation, at_hook_pos = _native_rotation(attn, layer, kind, len(ids))
    mechanism = attn.mechanism
    row_bias, bias_hooks = _native_row_bias(mechanism, traits.biases_logits, layer, kind)
    hooked: dict[str, torch.Tensor] = {}  # what the bias reads, filled after the forward pass
    reference_bias = None
    if row_bias is not None and reference is not None:
        reference_bias = _native_reference_bias(model, layer, kind, mechanism, row_bias, hooked, reference)
    decay = layer_decay_rows(attn)
    decay_hooks = tuple(decay.row_bias_hooks) if decay is not None else ()
    needed = {_QUERY_HOOK, _KEY_HOOK, *bias_hooks, *decay_hooks} | ({_POSITION_HOOK} if at_hook_pos else set())
    filed = _read_layer_hooks(model, lens.device, ids, layer, rows, n_keys, needed)
    n_heads = int(model.cfg.n_heads)
    keys = _one_key_per_query_head(filed[_KEY_HOOK].to(dtype), n_heads)
    rotated_at = None
    if rotation is not None:
        rotated_at = (filed[_POSITION_HOOK][:, :n_keys].float() if at_hook_pos
                      else torch.arange(n_keys, device=keys.device, dtype=torch.float32).expand(n_heads, -1))
    hooked.update({name: filed[name].to(dtype) for name in bias_hooks})
    bias = None if row_bias is None else partial(row_bias, hooked)
    kept = None if decay is None else partial(decay.query_rows_bias, {name: filed[name].to(dtype) for name in decay_hooks})
    return LayerView(kind=kind, q_rows=filed[_QUERY_HOOK].to(dtype), keys=keys, scale=1.0 / math.sqrt(attn.d_head),
                      rotation=rotation, rotated_at=rotated_at, row_bias=bias, reference_bias=reference_bias,
                      rotary_role=traits.role == "rotary", kept_bias=kept)


def _native_row_bias(mechanism: Any, biases_logits: bool, layer: int, kind: str
                     ) -> tuple[RowBias | None, tuple[str, ...]]:
    """(the mechanism's query-row bias, the hooks it reads) for a layer that biases its scores, else (None, ())."""
    if not biases_logits:
        return None, ()
    row_bias: RowBias | None = getattr(mechanism, "query_rows_bias", None)
    if row_bias is None:
        raise InputError(f"layer {layer} ({kind!r}) biases its scores in a way score_decomposition cannot "
                         "recompute for a few query rows (its mechanism has no query_rows_bias)")
    return row_bias, tuple(mechanism.row_bias_hooks)


def _read_layer_hooks(model: Any, device: torch.device, ids: list[int], layer: int, rows: list[int], n_keys: int,
                      needed: set[str]) -> dict[str, torch.Tensor]:
    """The ``needed`` hooks of ``layer`` (batch dropped; the query rows [head, R, d], the keys [kv_head or head,
    K, d]), from a forward pass stopped once they have all fired."""
    filed: dict[str, torch.Tensor] = {}
    row_index = torch.tensor(rows, device=device)

    def file(name: str, value: torch.Tensor, hook: Any = None) -> None:
        value = value.detach()[0]
        if name == _QUERY_HOOK:
            value = value[row_index].transpose(0, 1).clone()  # [head, R, d]: only the rows asked for
        elif name == _KEY_HOOK:
            value = value[:n_keys].transpose(0, 1)  # [kv_head or head, K, d]
        filed[name] = value
        if filed.keys() >= needed:
            raise _StopForward

    hooks = [(f"blocks.{layer}.attn.{name}", partial(file, name)) for name in sorted(needed)]
    _forward_until_stopped(model, torch.tensor([ids], device=device), layer, hooks)
    if filed.keys() < needed:
        raise RuntimeError(f"layer {layer} ran without firing {sorted(needed - filed.keys())}; "
                           "score_decomposition reads those hooks")
    return filed


def _forward_until_stopped(model: Any, input_ids: torch.Tensor, layer: int, hooks: list[tuple[str, Any]]) -> None:
    """Run ``input_ids`` through the layers up to ``layer`` with ``hooks`` until one raises :class:`_StopForward`;
    running out of memory is a MemoryLimitError."""
    out_of_memory = False
    try:
        with forward_lock(model), torch.inference_mode(), model.hooks(fwd_hooks=hooks):
            model.forward_logits(input_ids, stop_at_layer=layer + 1)
    except _StopForward:
        pass
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        out_of_memory = True  # raised outside the handler, so the failed pass's tensors are freed first
    if out_of_memory:
        raise memory_limit_error(model, "score decomposition", int(input_ids.shape[1]),
                                 "decompose a shorter window of the text")


def _one_key_per_query_head(keys: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Keys [kv_head, K, d] of grouped-query attention repeated to [head, K, d] (already one per head: as given)."""
    if keys.shape[0] != n_heads:
        keys = keys.repeat_interleave(n_heads // keys.shape[0], dim=0)
    return keys


def hf_view(lens: HFLens, ids: list[int], layer: int, rows: list[int], n_keys: int, dtype: torch.dtype,
            reference: str | torch.Tensor | None) -> LayerView:
    """The generic Hugging Face path: the layer's ``apply_rotary_pos_emb`` call read through nnsight (its
    queries and keys before and after the rotation, cos and sin) and its eager attention weights of the rows,
    with the rotation and the pattern checked against what repo_lens recomputes from them."""
    kind = _hf_rotary_layer_kind(lens, layer)
    path = lens.layer_paths[layer]
    module = lens.hf_model.get_submodule(path)
    saved = _trace_rotary_call(lens, path, module, ids, layer, rows, n_keys)
    q_pre, k_pre, cos, sin = (saved[name][0] if saved[name].dim() == 4 else saved[name]
                              for name in ("q", "k", "cos", "sin"))
    cos, sin = cos.reshape(-1, cos.shape[-1]), sin.reshape(-1, sin.shape[-1])  # [T, d_rot]
    tolerance = 1e-4 if cos.dtype in (torch.float32, torch.float64) else 2e-2
    rotation, index = _identified_rotation(lens, layer, q_pre, cos, sin, saved["rot_q"][0], len(ids), tolerance)
    n_heads = int(q_pre.shape[0])
    q_rot, k_rot = saved["rot_q"][0].to(dtype), saved["rot_k"][0].to(dtype)
    keys = _one_key_per_query_head(k_rot[:, :n_keys], n_heads)
    scale = float(getattr(module, "scaling", q_pre.shape[-1] ** -0.5))
    view = LayerView(kind=kind, q_rows=q_rot[:, rows], keys=keys, scale=scale, rotation=rotation,
                      rotated_at=index[:n_keys].expand(n_heads, -1), row_bias=None, reference_bias=None,
                      rotary_role=True)
    _check_hf_pattern(view, saved["weights"].to(dtype), rows, layer, tolerance)
    return view


def _hf_rotary_layer_kind(lens: HFLens, layer: int) -> str:
    """The kind of a rotary layer of a Hugging Face model; a RoPE-free layer is an InputError."""
    from repo_lens.model.registry import ROPE_KIND

    kinds = _hf_layer_kinds(lens)
    if kinds[layer] != ROPE_KIND:
        raise InputError(f"layer {layer} of this Hugging Face model rotates nothing (a RoPE-free layer); on the "
                         "generic path score_decomposition reads rotary layers: "
                         f"{[index for index, kind in enumerate(kinds) if kind == ROPE_KIND]}")
    return kinds[layer]


def _trace_rotary_call(lens: HFLens, path: str, module: Any, ids: list[int], layer: int, rows: list[int],
                       n_keys: int) -> dict[str, Any]:
    """What the layer at ``path`` passes to and gets from ``apply_rotary_pos_emb`` ("q", "k", "cos", "sin",
    "rot_q", "rot_k") and its attention weights of the rows over the first ``n_keys`` keys ("weights")."""
    saved: dict[str, Any] = {}
    input_ids = torch.tensor([ids], dtype=torch.long, device=lens.device)
    try:
        with forward_lock(lens.hf_model), torch.inference_mode(), lens.nn.trace(input_ids) as tracer:
            envoy = lens.envoy(path)
            rotary_call = envoy.source.apply_rotary_pos_emb_0
            args = rotary_call.inputs[0]
            saved["q"], saved["k"], saved["cos"], saved["sin"] = (args[0].save(), args[1].save(), args[2].save(),
                                                                  args[3].save())
            rotated = rotary_call.output
            saved["rot_q"], saved["rot_k"] = rotated[0].save(), rotated[1].save()
            weights = envoy.output[1]
            saved["weights"] = None if weights is None else weights[0, :, rows, :n_keys].save()
            tracer.stop()
    except AttributeError as error:
        raise InputError(
            f"cannot read layer {layer}'s rotation: its attention ({type(module).__name__}) calls no "
            "apply_rotary_pos_emb that score_decomposition can read; this model's rotary kind is not one repo_lens "
            f"can identify ({str(error).split(';')[0]})") from None
    if saved.get("weights") is None:
        raise InputError(f"layer {layer} returned no attention weights; the model must run eager attention "
                         "(load it with repo_lens.hf.load_hf, which sets it)")
    return saved


def _identified_rotation(lens: HFLens, layer: int, q_pre: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         rotated_q: torch.Tensor, n_tokens: int, tolerance: float) -> tuple[Rotation, torch.Tensor]:
    """(the layer's rotation, the token index [T] it rotates by), once cos [T, d_rot] is cos(t · inv_freq) of the
    model's rotary_emb (times its attention scaling) and ``rotated_q`` the rotate-half rotation of ``q_pre``."""
    rotary = _hf_rotary_module(lens)
    n_rotary = int(cos.shape[-1])
    inv_freq = rotary.inv_freq.float().to(cos.device)
    if 2 * inv_freq.numel() != n_rotary or q_pre.dim() != 3:
        raise _unidentified(layer, f"cos has {n_rotary} channels for {inv_freq.numel()} frequencies")
    index = torch.arange(n_tokens, device=cos.device, dtype=torch.float32)
    rotation = Rotation(inv_freq[None, :].expand(int(q_pre.shape[0]), -1), 1.0)
    angles = (index[:, None] * inv_freq[None, :]).repeat(1, 2)
    attention_scaling = float(getattr(rotary, "attention_scaling", 1.0))
    if not torch.allclose(cos.float(), angles.cos() * attention_scaling, atol=tolerance, rtol=tolerance):
        raise _unidentified(layer, "its cos is not cos(t · inv_freq) of the token index t")
    expected_q = _neox(q_pre.float(), cos.float(), sin.float())
    if not torch.allclose(expected_q, rotated_q.float(), atol=tolerance, rtol=tolerance):
        raise _unidentified(layer, "its rotation is not the rotate-half (NeoX) rotation of pairs (i, i + d/2)")
    return rotation, index


def _neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [head, T, d] rotated by cos/sin [T, d_rot] (rotate-half on the first d_rot channels)."""
    n_rotary = cos.shape[-1]
    rotated, rest = x[..., :n_rotary], x[..., n_rotary:]
    first, second = rotated.chunk(2, dim=-1)
    return torch.cat((rotated * cos + torch.cat((-second, first), dim=-1) * sin, rest), dim=-1)


def _unidentified(layer: int, why: str) -> InputError:
    return InputError(f"layer {layer}'s rotary kind is not one repo_lens can identify ({why}); score_decomposition "
                      "splits the scores of RoPE layers (rotate-half pairs, angles t · inv_freq of the model's "
                      "rotary_emb) on the generic Hugging Face path")


def _hf_layer_kinds(lens: HFLens) -> list[str]:
    from repo_lens.model.registry import NOPE_KIND, ROPE_KIND

    config = lens.hf_model.config
    config = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    flags = getattr(config, "no_rope_layers", None)
    if not flags:
        return [ROPE_KIND] * int(lens.n_layers)
    return [ROPE_KIND if flag else NOPE_KIND for flag in flags][: int(lens.n_layers)]


def _hf_rotary_module(lens: HFLens) -> Any:
    for name, module in lens.hf_model.named_modules():
        if name.rsplit(".", 1)[-1] == "rotary_emb" and hasattr(module, "inv_freq"):
            return module
    raise InputError("this Hugging Face model has no rotary_emb module with inv_freq; score_decomposition needs "
                     "the rotary frequencies to place the scores at reference positions")


def _check_hf_pattern(view: LayerView, weights: torch.Tensor, rows: list[int], layer: int, tolerance: float) -> None:
    """The model's eager weights of the rows must be softmax(q·k · scaling) over the causal keys."""
    scores = view.q_rows @ view.keys.transpose(-1, -2) * view.scale
    row_index = torch.tensor(rows, device=scores.device)
    key_index = torch.arange(scores.shape[-1], device=scores.device)
    pattern = scores.masked_fill(key_index[None, :] > row_index[:, None], float("-inf")).softmax(-1)
    if not torch.allclose(pattern.to(weights.dtype), weights, atol=tolerance, rtol=0.0):
        raise _unidentified(layer, "its attention weights are not softmax(q·k · scaling) over the keys before each "
                                   "query (a sliding window, soft-capping or a bias?)")


def reference_positions(reference: str | torch.Tensor, n_heads: int, n_keys: int,
                         device: torch.device) -> torch.Tensor:
    """[head, K] float32 reference positions of the first ``n_keys`` tokens."""
    if isinstance(reference, torch.Tensor):
        return reference[:, :n_keys].to(device)
    if reference == "integer":
        return torch.arange(n_keys, device=device, dtype=torch.float32).expand(n_heads, -1)
    return torch.zeros(n_heads, n_keys, device=device, dtype=torch.float32)


