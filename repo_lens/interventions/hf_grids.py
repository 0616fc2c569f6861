"""The per-layer grids on the generic Hugging Face lens: ``ablation_grid``, ``patch`` and ``attribute``.

One cell per layer (``grid="layer"``): the positions of an HFLens are shared by every head of a layer, so the
per-head and per-token grids are refused (see :mod:`repo_lens.interventions.hf_positions`). Each cell's
positions are written as the rotary cos and sin that layer's attention receives; cells run batched.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from repo_lens.errors import InputError
from repo_lens.hf.model import HFLens
from repo_lens.interventions.edit_targets import Indices, token_mask
from repo_lens.interventions.edited_runs import Batch, Inputs, as_single, pair_mapping, transplant
from repo_lens.interventions.hf_positions import (edited_positions, grid_layers, layer_grid_values, model_positions,
                                                  run_with_positions, unedited_metrics)
from repo_lens.interventions.metrics import InterventionGrid, Metric, metric_values
from repo_lens.interventions.modes import Mode
from repo_lens.interventions.options import GridOptions


def _grid(method: str, values: dict[str, np.ndarray], baselines: dict[str, float], clean: float, layers: list[int],
          lens: HFLens, started: float, meta: dict[str, Any]) -> InterventionGrid:
    also = {name: values[name] for name in values if name != "metric"}
    if also:
        meta = {**meta, "also_baseline": {name: baselines[name] for name in also}}
    return InterventionGrid(method=method, grid="layer", values=values["metric"], baseline=baselines["metric"],
                            clean=clean, layers=layers, heads=list(range(lens.n_heads)),
                            seconds=round(time.perf_counter() - started, 4), meta=meta, also=also)


def ablation_grid_hf(lens: HFLens, inputs: Inputs, metric: Metric, mode: Mode, grid: str, layers: Indices, heads: Indices,
                     options: GridOptions) -> InterventionGrid:
    """:func:`repo_lens.interventions.ablation_grid` on an HFLens: one layer ablated at a time."""
    started = time.perf_counter()
    chosen = grid_layers(lens, grid, layers, heads, "ablation_grid")
    batch = as_single(lens, inputs, "inputs")
    selected = token_mask(options.tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    own, edit = edited_positions(lens, batch, mode, selected, inputs)
    edited = {layer: edit(layer) for layer in chosen}
    metrics = {"metric": metric, **(options.also or {})}
    values = layer_grid_values(lens, batch.ids, own, edited, metrics, options, "ablating")
    with torch.no_grad():
        every = float(metric_values(metric, run_with_positions(lens, batch.ids, per_layer=edited))[0])
    return _grid("ablate", values, unedited_metrics(lens, batch.ids, metrics), every, chosen, lens, started,
                 {"mode": mode.label})


def _patched_positions(lens: HFLens, clean: Inputs, corrupted: Inputs,
                       options: GridOptions) -> tuple[Batch, Batch, torch.Tensor, torch.Tensor]:
    """The clean and corrupted batches, the corrupted run's positions [1, T] and the positions with the clean
    ones written at the aligned, selected tokens [1, T]."""
    clean_batch, corrupted_batch = as_single(lens, clean, "clean"), as_single(lens, corrupted, "corrupted")
    mapping = pair_mapping(clean_batch, corrupted_batch, options.align, options.tokens)
    own = model_positions(lens, corrupted_batch.ids)
    patched = transplant(model_positions(lens, clean_batch.ids)[:, None], own[:, None], mapping, False)[:, 0]
    return clean_batch, corrupted_batch, own, patched


def patch_hf(lens: HFLens, clean: Inputs, corrupted: Inputs, metric: Metric, grid: str, layers: Indices, heads: Indices,
             options: GridOptions) -> InterventionGrid:
    """:func:`repo_lens.interventions.patch` on an HFLens: the clean positions written into one layer at a time."""
    started = time.perf_counter()
    chosen = grid_layers(lens, grid, layers, heads, "patch")
    clean_batch, corrupted_batch, own, patched = _patched_positions(lens, clean, corrupted, options)
    metrics = {"metric": metric, **(options.also or {})}
    values = layer_grid_values(lens, corrupted_batch.ids, own, {layer: patched for layer in chosen}, metrics, options,
                               "patching")
    same_length = clean_batch.lengths == corrupted_batch.lengths
    clean_metric = unedited_metrics(lens, clean_batch.ids, {"metric": metric})["metric"] if same_length else np.nan
    return _grid("patch", values, unedited_metrics(lens, corrupted_batch.ids, metrics), clean_metric, chosen, lens,
                 started, {})


def attribute_hf(lens: HFLens, clean: Inputs, corrupted: Inputs, metric: Metric, grid: str, layers: Indices, heads: Indices,
                 options: GridOptions) -> InterventionGrid:
    """:func:`repo_lens.interventions.attribute` on an HFLens: per layer, ∂metric/∂positions · (clean − corrupted)
    from one forward and one backward pass of the corrupted prompt."""
    started = time.perf_counter()
    chosen = grid_layers(lens, grid, layers, heads, "attribute")
    with torch.inference_mode(False), torch.enable_grad():  # a backward pass, also under torch.inference_mode()
        clean_batch, corrupted_batch, own, patched = _patched_positions(lens, clean, corrupted, options)
        leaves = {layer: torch.zeros_like(own, requires_grad=True) for layer in chosen}
        logits = run_with_positions(lens, corrupted_batch.ids, per_layer={l: own + leaves[l] for l in chosen})
        values = metric_values(metric, logits)
        if not values.requires_grad:
            raise InputError("attribute needs a differentiable metric (a torch expression of the logits, e.g. "
                             "answer_logprob or logit_difference) and a rotary embedding that passes gradients to its "
                             "positions; niah_exact_match and numpy metrics have no gradient: use patch for them")
        grads = torch.autograd.grad(values.sum(), [leaves[layer] for layer in chosen], allow_unused=True)
    baseline = float(values[0].detach())
    estimate = np.full(lens.n_layers, np.nan)
    for layer, grad in zip(chosen, grads):
        change = float((grad * (patched - own)).double().sum()) if grad is not None else 0.0
        estimate[layer] = baseline + change
    same_length = clean_batch.lengths == corrupted_batch.lengths
    clean_metric = unedited_metrics(lens, clean_batch.ids, {"metric": metric})["metric"] if same_length else np.nan
    return _grid("attribute", {"metric": estimate}, {"metric": baseline}, clean_metric, chosen, lens, started, {})
