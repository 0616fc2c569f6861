"""Position edits on the generic Hugging Face lens (:class:`repo_lens.hf.HFLens`).

A model loaded by :func:`repo_lens.hf.load_hf` has one position per token, shared by every head of a
layer: the ``position_ids`` the model gives its rotary embedding (a float works: the rotary embedding
multiplies them, as floats, by its inverse frequencies). Edits write them through nnsight:

* every layer at once (``layers=None``): the rotary embedding's ``position_ids`` input;
* chosen layers: the rotary cos and sin (``position_embeddings``) each chosen attention layer receives,
  computed by the model's own rotary embedding from the edited positions. A model whose attention layers
  take no ``position_embeddings`` supports only the first.

The modes mean what they mean for a repo_lens RoPE layer (the registry's rope entry: the positions
themselves, integer 0..T−1, constant 0). Per-head edits and the per-head grids are refused: every head
of a layer shares its positions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from repo_lens.capture import forward_lock
from repo_lens.errors import InputError
from repo_lens.hf.model import HFLens, find_rotary_path, layer_kinds
from repo_lens.interventions.edited_runs import Batch, Inputs, as_batch
from repo_lens.interventions.edits import edit_values, keep_tokens, layer_seeds, prompt_seeds, token_orders
from repo_lens.interventions.metrics import Metric, metric_values
from repo_lens.interventions.edit_targets import Indices, token_mask
from repo_lens.interventions.modes import Mean, Mode
from repo_lens.interventions.options import GridOptions, TokenSelection
from repo_lens.model.registry import NOPE_KIND, ROPE_KIND, position_edit
from repo_lens.validation import check_indices

ROPE = position_edit(ROPE_KIND)  # the positions themselves: integer 0..T−1, constant 0
_PER_HEAD = ("every head of a layer of an HFLens shares its positions (the position_ids its rotary embedding "
             "reads), so there are no per-head positions to edit")


def rotary_path(lens: HFLens, what: str) -> str:
    """The module path of ``lens``' rotary embedding, or an InputError naming what ``what`` needs."""
    path = find_rotary_path(lens.hf_model)
    if path is None:
        raise InputError(f"{what} on an HFLens writes the position_ids its rotary embedding reads; "
                         f"{type(lens.hf_model).__name__} has no rotary_emb module (positions that are not rotary, "
                         "e.g. a learned position table, cannot take edited positions). Load the checkpoint with "
                         "repo_lens.load(path) if repo_lens has an adapter for it")
    model = type(lens.hf_model).__name__
    container = lens.layer_paths[0].rsplit(".", 2)[0] + "." if lens.layer_paths else None
    if container and path.startswith(container):
        raise InputError(f"{what} on an HFLens writes the position_ids of the model's rotary embedding; {model} has "
                         f"one in each layer ({path}), which the generic path does not edit")
    parameters = inspect.signature(lens.hf_model.get_submodule(path).forward).parameters
    extra = [name for name, parameter in parameters.items() if name not in ("self", "x", "position_ids")
             and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]
    if "position_ids" not in parameters or extra:
        raise InputError(f"{what} on an HFLens writes the position_ids its rotary embedding reads, and that embedding "
                         f"must take (x, position_ids) alone; the rotary embedding of {model} ({path}) takes "
                         f"{list(parameters)}, so its positions are not one position_ids the generic path can edit")
    return path


def edited_layers(lens: HFLens, layers: Indices, what: str) -> list[int] | None:
    """The layers an edit writes (None: every layer at once, at the rotary embedding); chosen layers need
    attention layers that take the rotary cos and sin (``position_embeddings``), else an InputError."""
    rotary_path(lens, what)
    if layers is None:
        return None
    chosen = sorted(set(check_indices(layers, lens.n_layers, "layer", owner="model")))
    attention = lens.hf_model.get_submodule(lens.layer_paths[chosen[0]])
    if "position_embeddings" not in inspect.signature(attention.forward).parameters:
        raise InputError(f"{what} of chosen layers on an HFLens writes the rotary cos and sin each attention layer "
                         f"receives (position_embeddings); {type(attention).__name__} takes none, so only the "
                         "position_ids of the whole model can be written: pass layers=None")
    return chosen


def check_every_head(lens: HFLens, heads: Indices, what: str) -> None:
    """An InputError unless ``heads`` is None or every head of ``lens``."""
    if heads is None:
        return
    chosen = set(check_indices(heads, lens.n_heads, "head", owner="model"))
    if chosen != set(range(lens.n_heads)):
        raise InputError(f"{what}: {_PER_HEAD}; pass heads=None to edit every head of the chosen layers, or load "
                         "the checkpoint with repo_lens.load(path) (Llama, OLMo-2, RePo) for per-head edits")


def model_positions(lens: HFLens, ids: torch.Tensor) -> torch.Tensor:
    """float32 [batch, T]: the position_ids the model gives its rotary embedding for ``ids`` (the run stops there)."""
    path, saved = rotary_path(lens, "reading positions"), {}
    with forward_lock(lens.hf_model), torch.no_grad(), lens.nn.trace(ids) as tracer:
        args, kwargs = lens.envoy(path).inputs
        saved["ids"] = (kwargs["position_ids"] if "position_ids" in kwargs else args[1]).save()
        tracer.stop()
    positions = saved["ids"].detach().float()
    if positions.dim() != 2:
        raise InputError(f"the rotary embedding of {type(lens.hf_model).__name__} reads position_ids shaped "
                         f"{tuple(positions.shape)} (several per token, as multimodal models have); the generic path "
                         "edits one position per token")
    return positions.expand(ids.shape[0], -1).clone()


def rotary_embeddings(lens: HFLens, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary (cos, sin) the model computes from ``positions`` [batch, T] (floats work)."""
    rotary = lens.hf_model.get_submodule(rotary_path(lens, "rotary embeddings"))
    dtype = lens.hf_model.get_input_embeddings().weight.dtype
    return rotary(torch.zeros((), dtype=dtype, device=positions.device), positions)


def run_with_positions(lens: HFLens, ids: torch.Tensor, *, every: torch.Tensor | None = None,
                       per_layer: Mapping[int, torch.Tensor] | None = None) -> torch.Tensor:
    """Logits [batch, T, vocab] of ``ids`` with the model's positions replaced: ``every`` [batch, T] at the
    rotary embedding (every layer), or ``per_layer`` {layer: [batch, T]} in those layers' attention. Gradients
    flow to the positions when they require them."""
    rotary = rotary_path(lens, "editing positions")
    written = {layer: rotary_embeddings(lens, positions) for layer, positions in sorted((per_layer or {}).items())}
    saved: dict[str, Any] = {}
    with forward_lock(lens.hf_model), lens.nn.trace(ids):
        if every is not None:
            args, kwargs = lens.envoy(rotary).inputs
            if "position_ids" in kwargs:
                kwargs = {**kwargs, "position_ids": every}
            else:
                args = (args[0], every, *args[2:])
            lens.envoy(rotary).inputs = (args, kwargs)
        for layer, embeddings in written.items():
            envoy = lens.envoy(lens.layer_paths[layer])
            args, kwargs = envoy.inputs
            envoy.inputs = (args, {**kwargs, "position_embeddings": embeddings})
        saved["logits"] = lens.nn.output.save()
    output = saved["logits"]
    return output.logits if hasattr(output, "logits") else output[0]


def edited_positions(lens: HFLens, batch: Batch, mode: Mode, tokens: torch.Tensor | None, inputs: Inputs,
                     allow_beyond_context: bool = False) -> tuple[torch.Tensor, Callable[[int], torch.Tensor]]:
    """(the model's positions [batch, T], ``edit(layer)`` -> the positions under ``mode`` in that layer),
    seeded per prompt and layer as on a repo_lens model; ``tokens``: the mask of the tokens written."""
    width, lengths = batch.ids.shape[1], batch.lengths
    own = model_positions(lens, batch.ids)
    seeds = prompt_seeds(batch.ids, lengths, getattr(mode, "seed", 0)) if mode.draws else [0] * len(lengths)
    orders = token_orders(mode, lengths, width, seeds)
    mean = None
    if isinstance(mode, Mean):
        mean = reference_mean(lens, inputs if mode.reference is None else mode.reference, width, allow_beyond_context)

    def edit(layer: int) -> torch.Tensor:
        value = own[:, None, :]
        new = edit_values(value, mode, ROPE, mean=mean, orders=orders, lengths=lengths, seeds=layer_seeds(seeds, layer))
        return keep_tokens(new, value, tokens)[:, 0]

    return own, edit


def reference_mean(lens: HFLens, reference: Inputs, width: int, allow_beyond_context: bool) -> torch.Tensor:
    """[1, 1, ≥width]: each token index's mean position over the ``reference`` inputs (a padded row counts
    only up to its length); a reference set shorter than ``width`` tokens is an InputError."""
    batch = as_batch(lens, reference, allow_beyond_context)
    positions = model_positions(lens, batch.ids)
    lengths = torch.as_tensor(batch.lengths, device=positions.device)
    valid = (torch.arange(positions.shape[1], device=positions.device)[None, :] < lengths[:, None]).float()
    if width > positions.shape[1]:
        raise InputError(f"mean ablation of {width} tokens needs a reference set at least as long; its longest input "
                         f"has {positions.shape[1]} tokens")
    return ((positions * valid).sum(0) / valid.sum(0).clamp(min=1))[None, None, :]


def edit_run(lens: HFLens, inputs: Inputs, mode: Mode, layers: Indices, what: str, *, tokens: TokenSelection = None,
             allow_beyond_context: bool = False) -> tuple[Batch, torch.Tensor, dict[int, torch.Tensor]]:
    """The batch, the model's own positions and the edited positions of each edited layer (key −1: every
    layer at once, written at the rotary embedding)."""
    chosen = edited_layers(lens, layers, what)
    batch = as_batch(lens, inputs, allow_beyond_context)
    selected = token_mask(tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    own, edit = edited_positions(lens, batch, mode, selected, inputs, allow_beyond_context)
    return batch, own, ({-1: edit(0)} if chosen is None else {layer: edit(layer) for layer in chosen})


def ablate_hf(lens: HFLens, inputs: Inputs, mode: Mode, layers: Indices, heads: Indices, tokens: TokenSelection,
              allow_beyond_context: bool) -> torch.Tensor:
    """:func:`repo_lens.interventions.ablate`'s logits on an HFLens."""
    check_every_head(lens, heads, "ablate")
    batch, _, edited = edit_run(lens, inputs, mode, layers, "ablate", tokens=tokens,
                                allow_beyond_context=allow_beyond_context)
    with torch.no_grad():
        if -1 in edited:
            return run_with_positions(lens, batch.ids, every=edited[-1])
        return run_with_positions(lens, batch.ids, per_layer=edited)


def ablated_positions_hf(lens: HFLens, inputs: Inputs, mode: Mode, layers: Indices, heads: Indices, tokens: TokenSelection,
                         allow_beyond_context: bool) -> np.ndarray:
    """:func:`repo_lens.interventions.ablated_positions` on an HFLens: (n_layers, n_heads, T) float32, the
    edited positions in the edited layers, the model's own elsewhere, 0 in layers without RoPE (as a trace)."""
    check_every_head(lens, heads, "ablated_positions")
    _, own, edited = edit_run(lens, inputs, mode, layers, "ablated_positions", tokens=tokens,
                              allow_beyond_context=allow_beyond_context)
    rows = [edited.get(-1, edited.get(layer, own))[0] for layer in range(lens.n_layers)]
    positions = torch.stack(rows)[:, None, :].expand(-1, lens.n_heads, -1).float().cpu().numpy().copy()
    positions[[index for index, kind in enumerate(layer_kinds(lens)) if kind == NOPE_KIND]] = 0.0
    return positions


def layer_cells(lens: HFLens, ids: torch.Tensor, cells: Sequence[int], own: torch.Tensor,
                edited: Mapping[int, torch.Tensor], metrics: Mapping[str, Metric]) -> dict[str, torch.Tensor]:
    """Each metric of one batched run of ``ids`` [1, T] per cell: row r has layer ``cells[r]``'s positions
    replaced by ``edited[cells[r]]`` [1, T], every other layer keeps ``own`` [1, T]."""
    rows = len(cells)
    per_layer = {}
    for layer in dict.fromkeys(cells):
        chosen = torch.tensor([cell == layer for cell in cells], device=own.device)[:, None]
        per_layer[layer] = torch.where(chosen, edited[layer].to(own.dtype), own)
    with torch.no_grad():
        logits = run_with_positions(lens, ids.expand(rows, -1), per_layer=per_layer)
    return {name: metric_values(metric, logits) for name, metric in metrics.items()}


def grid_layers(lens: HFLens, grid: str, layers: Indices, heads: Indices, what: str) -> list[int]:
    """The layers of a per-layer grid on an HFLens; per-head and per-token grids are an InputError."""
    if grid != "layer":
        raise InputError(f"{what} on an HFLens runs grid=\"layer\" only: {_PER_HEAD}, and grid={grid!r} needs them. "
                         "Pass grid=\"layer\" (and heads=None), or load the checkpoint with repo_lens.load(path) "
                         "(Llama, OLMo-2, RePo) for per-head grids")
    check_every_head(lens, heads, what)
    chosen = edited_layers(lens, list(range(lens.n_layers)) if layers is None else layers, what)
    assert chosen is not None  # layers given: the chosen ones
    return chosen


def layer_grid_values(lens: HFLens, ids: torch.Tensor, own: torch.Tensor, edited: Mapping[int, torch.Tensor],
                      metrics: Mapping[str, Metric], options: GridOptions, what: str) -> dict[str, np.ndarray]:
    """Each metric per layer (n_layers,), NaN outside ``edited``, ``options.batch_size`` cells a pass."""
    from tqdm.auto import tqdm

    layers = sorted(edited)
    values = {name: np.full(lens.n_layers, np.nan) for name in metrics}
    chunks = [layers[first:first + options.batch_size] for first in range(0, len(layers), options.batch_size)]
    for chunk in tqdm(chunks, desc=f"{what} layer", unit="batch", disable=not options.progress):
        for name, result in layer_cells(lens, ids, chunk, own, edited, metrics).items():
            values[name][chunk] = result.double().cpu().numpy()
    return values


def unedited_metrics(lens: HFLens, ids: torch.Tensor, metrics: Mapping[str, Metric]) -> dict[str, float]:
    """Each metric of the unedited run of ``ids`` [1, T]."""
    with torch.no_grad(), forward_lock(lens.hf_model):
        logits = lens.hf_model(ids).logits
    return {name: float(metric_values(metric, logits)[0]) for name, metric in metrics.items()}

