"""Why a token gets its position: the learned position of every head and token of one layer, attributed to
the parts of the residual stream its position module reads (the embedding, every earlier attention output
and MLP output, and each earlier head), in TransformerLens' labels.

A position module (RePo's f, the per-layer increments' δ, GRAPE-M's ω, FoX's forget gates) reads the
layer's attention input, the normed sum ``embed + Σ_{l<L} (attn_out_l + mlp_out_l)``. Removing one part
from that input, and from nothing else, and re-running only the module is a path ablation: the attention,
the values and every other layer see the unedited stream. ``value = z − z_without_part``: how far the
part moves the position. For mechanisms that sum increments the module's own output is the running sum,
so the part is removed from every token's increment and the sum itself is attributed.

- ``method="ablation"`` (exact): one forward caches the parts, then the module alone runs once per part,
  in batches: O(parts × module), not one forward per part.
- ``method="gradient"``: the linearised attribution, ∇z · part at the actual input (through the norm), one
  forward-mode product per part. ``completeness_error`` is Σ attributions − (z − z with every part
  removed): zero where the module is linear in its input.

A head's part: on pre-norm blocks (Llama) its share of ``o_proj``'s output; on post-norm blocks (OLMo-2,
the published RePo model), where the attention output passes through a norm, the attention output minus
the same output recomputed without that head.

Example:
    >>> import repo_lens
    >>> from repo_lens.model.tiny import tiny_model
    >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
    >>> found = position_attribution(lens, [5, 9, 2, 7], layer=2)
    >>> found.labels[:3], found.values.shape
    (['embed', '0_attn_out', '0_mlp_out'], (4, 4, 13))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_lens.errors import InputError
from repo_lens.model.registry import is_learned, mechanism_traits
from repo_lens.trace import flag_nonfinite
from repo_lens.validation import check_index, check_indices, check_int, require_lens_model

if TYPE_CHECKING:
    import torch

    from repo_lens.protocol import HookedLensProtocol

METHODS = ("ablation", "gradient")
BATCH = 16  # ablated inputs per module call


@dataclass(frozen=True)
class PositionAttribution:
    """The attribution of one layer's positions: ``values`` [head, token, component] follows ``heads``,
    ``tokens`` and ``labels``; ``positions`` [head, token] are the layer's own."""

    layer: int
    heads: list[int]
    tokens: list[int]
    labels: list[str]
    values: np.ndarray
    positions: np.ndarray
    method: str
    completeness_error: np.ndarray | None = None  # [head, token], gradient only

    def top(self, head: int, token: int, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` components that move head ``head``'s position of token ``token`` most, by |value|
        (``k``: an int >= 0; every component when ``k`` exceeds their number, none when it is 0).
        ``head`` and ``token`` are among the attribution's own ``heads`` and ``tokens``."""
        k = check_int(k, "k (how many components)", minimum=0)
        row = self.values[_row_of(self.heads, head, "head"), _row_of(self.tokens, token, "token")]
        order = np.argsort(-np.abs(row), kind="stable")[:k]
        return [(self.labels[i], float(row[i])) for i in order]

    def table(self) -> Any:
        """A tidy pandas DataFrame: one row per (layer, head, token, component) with its value."""
        import pandas as pd

        head, token, component = np.meshgrid(self.heads, self.tokens, self.labels, indexing="ij")
        return pd.DataFrame({"layer": self.layer, "head": head.ravel(), "token": token.ravel(),
                             "component": component.ravel(), "value": self.values.ravel()})


def position_attribution(lens: HookedLensProtocol, inputs: Any, layer: int, *, heads: int | Sequence[int] | None = None,
                         tokens: int | Sequence[int] | None = None, per_head: bool = True,
                         method: str = "ablation") -> PositionAttribution:
    """Attribute layer ``layer``'s positions of ``inputs`` (a text or token ids) to the components of its
    position module's input (see the module's description). ``heads`` and ``tokens`` select rows (all by
    default: an index or a list of indices, negatives counting from the end, as
    :func:`repo_lens.validation.check_indices` takes them); ``per_head`` adds one component per earlier
    head (``L{l}H{h}``) beside ``{l}_attn_out``. NaN or infinite positions are warned about, as
    :meth:`repo_lens.Lens.trace` warns. ``lens``: a Lens from :func:`repo_lens.load`, whose model's hooks
    it reads (an HFLens has none and is refused)."""
    import torch

    from repo_lens.lens_inputs import prepare_ids

    model = require_lens_model(lens, "position_attribution")
    layer = _check(model, layer, method)
    ids, _ = prepare_ids(lens, inputs, truncate=False, allow_beyond_context=False)
    heads = _selection(heads, model.cfg.n_heads, "head")
    tokens = _selection(tokens, len(ids), "token")
    with torch.no_grad():
        resid, parts = residual_parts(model, torch.tensor([ids], device=lens.device), layer, per_head)
    module_input = _module_function(model, layer, hasattr(model, "shared_delta"))
    labels = list(parts)
    stacked = torch.stack([parts[label] for label in labels])  # [component, pos, d_model]
    # the shared increments (lpi) read the embedding alone: only removing "embed" changes what they read
    embed_parts = torch.stack([parts["embed"] if label == "embed" else torch.zeros_like(resid) for label in labels])
    embed = parts["embed"]
    with torch.no_grad():
        positions = module_input(resid[None], embed[None])[0]  # [head, pos]
    error = None
    if method == "ablation":
        with torch.no_grad():
            moved = torch.cat([positions - module_input(resid - chunk, embed - embed_chunk)
                               for chunk, embed_chunk in zip(stacked.split(BATCH), embed_parts.split(BATCH))])
    else:
        moved = _linearised(module_input, (resid, embed), (stacked, embed_parts))
        base = [label for label in labels if not label.startswith("L")]  # embed + attn_out + mlp_out: the sum
        with torch.no_grad():
            removed = module_input((resid - sum(parts[label] for label in base))[None], torch.zeros_like(embed)[None])[0]
        error = (moved[[labels.index(label) for label in base]].sum(0) - (positions - removed))[heads][:, tokens]
    values = moved.permute(1, 2, 0)[heads][:, tokens]  # [head, token, component]
    found = PositionAttribution(layer, heads, tokens, labels, values.double().cpu().numpy(),
                                positions[heads][:, tokens].double().cpu().numpy(), method,
                                None if error is None else error.double().cpu().numpy())
    _warn_nonfinite(layer, heads, found.positions, found.values)
    return found


def residual_parts(model: Any, input_ids: torch.Tensor, layer: int,
                   per_head: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(the residual stream entering ``layer`` [pos, d_model], {label: part [pos, d_model]}) from one forward
    that stops at ``layer``; the parts but the heads sum to the stream."""

    seen: dict[str, torch.Tensor] = {}

    def keep(tensor: torch.Tensor, hook: Any) -> None:
        seen[hook.name] = tensor.detach()[0].float()

    names = ["hook_embed"] + [f"blocks.{l}.{part}" for l in range(layer) for part in ("hook_attn_out", "hook_mlp_out")]
    names += [f"blocks.{l}.attn.hook_z" for l in range(layer)] if per_head else []
    with model.hooks(fwd_hooks=[(name, keep) for name in names]):
        resid = model.forward_logits(input_ids, stop_at_layer=layer)[0].float()
    parts = {"embed": seen["hook_embed"]}
    for l in range(layer):
        parts[f"{l}_attn_out"] = seen[f"blocks.{l}.hook_attn_out"]
        parts[f"{l}_mlp_out"] = seen[f"blocks.{l}.hook_mlp_out"]
    if per_head:
        for l in range(layer):
            for head, part in enumerate(_head_parts(model.blocks[l], seen[f"blocks.{l}.attn.hook_z"],
                                                    parts[f"{l}_attn_out"])):
                parts[f"L{l}H{head}"] = part
    return resid, parts


def _head_parts(block: Any, z: torch.Tensor, attn_out: torch.Tensor) -> list[torch.Tensor]:
    """Each head's part of ``attn_out`` from its output ``z`` [pos, head, d_head]: its share of o_proj on a
    pre-norm block; the output minus the output without that head where a norm follows the attention."""
    import torch

    o_proj = block.attn.o_proj
    weight = o_proj.weight.float().view(o_proj.weight.shape[0], z.shape[1], z.shape[2])
    shares = torch.einsum("phd,mhd->hpm", z.float(), weight)  # [head, pos, d_model]
    if "after_attention" not in block._norm_at:
        return list(shares)
    total = shares.sum(0) + (o_proj.bias.float() if o_proj.bias is not None else 0.0)
    return [attn_out - block._norm("after_attention", total - share) for share in shares]


def _module_function(model: Any, layer: int, uses_shared: bool):
    """(residual, embedding) [batch, pos, d_model] each -> the layer's positions [batch, head, pos], as its
    module computes them (the shared increments of ``lpi`` models from the embedding; a module that
    ``reads_residual`` from the residual stream itself, the others from the block's normed input)."""
    block = model.blocks[layer]
    reads_residual = getattr(block.attn.mechanism, "reads_residual", False)

    def positions(resid: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
        shared = model.shared_increments(embed) if uses_shared else None
        source = resid if reads_residual else block._norm("before_attention", resid)
        return block.attn.mechanism(source, 0, state=None, shared=shared).float()

    return positions


def _linearised(function: Any, point: tuple[torch.Tensor, torch.Tensor],
                directions: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """[component, head, pos]: the directional derivative of ``function`` at ``point`` along each component's
    (residual part, embedding part)."""
    import torch
    from torch.func import jvp

    resid, embed = point
    out = []
    for part, embed_part in zip(*directions):
        tangent = jvp(lambda x, e: function(x[None], e[None])[0], (resid, embed), (part, embed_part))[1]
        out.append(tangent.detach())
    return torch.stack(out)


def _check(model: Any, layer: Any, method: str) -> int:
    """``layer`` as an index (numpy ints too, negatives from the end), after checking it has a position module."""
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    layer = check_index(layer, len(model.blocks), "layer", owner="model")
    kind = model.cfg.layer_mechanisms[layer]
    if not is_learned(kind) or mechanism_traits(kind).role == "contextual":
        learned = [l for l, k in enumerate(model.cfg.layer_mechanisms)
                   if is_learned(k) and mechanism_traits(k).role != "contextual"]
        raise InputError(f"layer {layer} is {kind!r}, whose positions no module computes from the residual "
                         f"stream; pick a layer with a learned position module: {learned}")
    if not hasattr(model.blocks[layer], "_norm_at"):
        raise InputError(f"layer {layer}'s block ({type(model.blocks[layer]).__name__}) is not a Llama or OLMo-2 "
                         "block; position attribution reads those blocks' norms")
    return layer


def _selection(chosen: int | Sequence[int] | None, size: int, name: str) -> list[int]:
    """Every index (None), or ``chosen`` checked by :func:`repo_lens.validation.check_indices`."""
    if chosen is None:
        return list(range(size))
    return check_indices(chosen, size, name, owner="model" if name == "head" else "input")


def _row_of(chosen: list[int], value: Any, name: str) -> int:
    """Where ``value`` (an integer) is in an attribution's ``chosen`` heads or tokens."""
    index = check_int(value, f"{name} (one of this attribution's {name}s {chosen})")
    if index not in chosen:
        raise InputError(f"{name} {index} is not in this attribution; pass one of its {name}s {chosen}")
    return chosen.index(index)


def _warn_nonfinite(layer: int, heads: list[int], positions: np.ndarray, values: np.ndarray) -> None:
    """Warn, as :meth:`repo_lens.Lens.trace` does, about NaN or infinite positions [head, token] of ``layer``'s
    ``heads`` (else about NaN or infinite attributions [..., component] of finite positions)."""
    if not np.isfinite(positions).all():
        placed = np.zeros((layer + 1, max(heads) + 1, positions.shape[-1]))
        placed[layer, heads] = positions  # (layer, head) pairs as the trace names them
        flag_nonfinite(placed, {}, stacklevel=4)
    elif not np.isfinite(values).all():
        warnings.warn(f"{int((~np.isfinite(values)).sum())} attributions of layer {layer} are NaN or infinite while its "
                      "positions are finite; the model's weights or input may be broken (try dtype='float32')",
                      stacklevel=3)


@dataclass(frozen=True)
class TokenAttribution:
    """Which earlier tokens move one position: ``gradient`` [context token, d_model] is ∂z/∂e_s of head
    ``head``'s position of token ``token`` with respect to each context token's embedding e_s, and
    ``values`` [context token] is gradient · embedding (the linearised effect of each token's embedding);
    tokens after ``token`` are not seen (causal attention) and are left out."""

    layer: int
    head: int
    token: int
    position: float
    gradient: np.ndarray
    values: np.ndarray


def token_attribution(lens: HookedLensProtocol, inputs: Any, layer: int, head: int, token: int) -> TokenAttribution:
    """The gradient of layer ``layer``, head ``head``'s position of token ``token`` with respect to every
    context token's embedding, through every layer below (one backward pass).

    Example:
        >>> import repo_lens
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=4, seed=0), None)
        >>> found = token_attribution(lens, [5, 9, 2, 7], layer=2, head=1, token=2)
        >>> found.values.shape, found.gradient.shape
        ((3,), (3, 32))
    """
    import torch

    from repo_lens.lens_inputs import prepare_ids

    model = require_lens_model(lens, "token_attribution")
    layer = _check(model, layer, "ablation")
    ids, _ = prepare_ids(lens, inputs, truncate=False, allow_beyond_context=False)
    head = check_index(head, model.cfg.n_heads, "head", owner="model")
    token = check_index(token, len(ids), "token", owner="input")
    seen: dict[str, torch.Tensor] = {}

    def leaf(embedded: torch.Tensor, hook: Any) -> torch.Tensor:
        seen["embed"] = embedded.detach().float().requires_grad_(True)
        return seen["embed"].to(embedded.dtype)

    def keep(positions: torch.Tensor, hook: Any) -> None:
        seen["positions"] = positions

    hooks = [("hook_embed", leaf), (f"blocks.{layer}.attn.hook_pos", keep)]
    # a backward pass, also when called under torch.inference_mode() or torch.no_grad()
    with torch.inference_mode(False), torch.enable_grad(), model.hooks(fwd_hooks=hooks):
        model.forward_logits(torch.tensor([ids], device=lens.device), stop_at_layer=layer + 1)
        position = seen["positions"][0, head, token].float()
        (gradient,) = torch.autograd.grad(position, seen["embed"])
    gradient = gradient[0, :token + 1].double()
    values = (gradient * seen["embed"].detach()[0, :token + 1].double()).sum(-1)
    found = TokenAttribution(layer, head, token, float(position.detach()), gradient.cpu().numpy(), values.cpu().numpy())
    _warn_nonfinite(layer, [head], np.array([[found.position]]), found.values)
    return found
