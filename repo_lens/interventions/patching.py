"""``patch``: write the clean run's positions into the corrupted run, one grid cell at a time, batched.

Each cell's patched run starts from the corrupted run's residual stream at the cell's layer (nothing
below it changes), and the cells of a chunk share one pass: before each layer the copies of the cells
patched there join the batch, so a pass costs the blocks each copy really needs. Tokens before the
first one whose positions a chunk changes keep the corrupted run's state too: the copies run only the
tokens from there on, against the corrupted run's KV cache (``prefix.py``). Equal, to float rounding,
to one full ``run_with_hooks`` forward per cell (TransformerLens' serial loop).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.capture import forward_lock
from repo_lens.interventions.alignment import transplant
from repo_lens.interventions.cells import Cell, cell_mask, grid_cells
from repo_lens.interventions.metrics import Metric, first_logit_row, metric_values
from repo_lens.interventions.pairs import Pair, prepare_pair
from repo_lens.interventions.prefix import first_changed, run_prefix, suffix_inputs
from repo_lens.interventions.results import GRIDS, InterventionGrid, check_grid
from repo_lens.interventions.runs import Captured, capture, run_from, with_unread_rows
from repo_lens.model.cache import KVCache
from repo_lens.protocol import check_batch_size


def _patch_hook(rows: slice, masks: torch.Tensor, patched: torch.Tensor):
    """Write ``patched`` into rows ``rows`` of the quantity where ``masks`` [rows, …] is True."""
    def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
        out = value.clone()
        out[rows] = torch.where(masks, patched.to(value.dtype), value[rows])
        return out

    return hook


def _hooks(pair: Pair, patched: dict[int, torch.Tensor], chunk: Sequence[Cell], counts: dict[int, int],
           first: int) -> list[tuple[str, Any]]:
    """Per layer of ``chunk``, the hook that patches its cells' rows, for tokens ``first``.. only."""
    site_of = {site.layer: site for site in pair.sites}
    hooks, before = [], 0
    for layer, count in counts.items():
        full = patched[layer]
        masks = torch.stack([cell_mask(cell, pair.heads, full.shape[1:]) for cell in chunk if cell.layer == layer])
        rows = slice(before, before + count)
        hooks.append((site_of[layer].hook, _patch_hook(rows, masks[:, :, first:].to(full.device), full[:, :, first:])))
        before += count
    return hooks


class _Prefixes:
    """The corrupted run's KV cache up to a token: the pair's shared prefix, or one run for the chunks
    that start later (kept for the next chunk that starts there too)."""

    def __init__(self, lens: Any, pair: Pair) -> None:
        self.lens, self.pair, self.last = lens, pair, pair.prefix

    def __call__(self, length: int) -> KVCache:
        if length == self.pair.prefix.length:
            return self.pair.prefix.cache
        if length != self.last.length:
            self.last = run_prefix(self.lens.model, self.pair.corrupted.ids, length)
        return self.last.cache


def run_cells(lens: Any, pair: Pair, corrupted: Captured, patched: dict[int, torch.Tensor], chunk: Sequence[Cell],
              metrics: Mapping[str, Metric], prefixes: _Prefixes) -> dict[str, torch.Tensor]:
    """Each metric of each cell of ``chunk`` (ordered by layer) in one batched pass: from its layer on, and
    from the first token the chunk changes on (the tokens before it keep the corrupted run's state),
    computing the logits of only the tokens the metrics read (``first_row``; NaN before them)."""
    model, shared = lens.model, pair.prefix.length
    first = first_changed(chunk, pair.heads, patched, corrupted.quantities, floor=shared)
    if first == pair.corrupted.lengths[0]:  # the clean positions equal the corrupted ones: nothing changes
        return {name: metric_values(metric, corrupted.logits).expand(len(chunk)) for name, metric in metrics.items()}
    counts = {layer: sum(cell.layer == layer for cell in chunk) for layer in dict.fromkeys(c.layer for c in chunk)}

    def join(layer: int, x: torch.Tensor) -> torch.Tensor:
        if layer not in counts:
            return x
        resid = corrupted.inputs[layer][0][:, first - shared:]
        return torch.cat((x, resid.expand(counts[layer], *resid.shape[1:])))

    start = chunk[0].layer
    increments = corrupted.inputs[start][-1]
    increments = increments[:, first - shared:] if isinstance(increments, torch.Tensor) else increments
    rest = suffix_inputs(prefixes(first), increments, first)
    unread = max(0, first_logit_row(list(metrics.values()), pair.corrupted.lengths[0]) - first)
    with torch.no_grad(), forward_lock(model), model.hooks(fwd_hooks=_hooks(pair, patched, chunk, counts, first)):
        logits = run_from(model, start, corrupted.inputs[start][0][:0, first - shared:], rest, join, rows_from=unread)
    logits = torch.cat((corrupted.logits[:, :first].expand(len(chunk), -1, -1), with_unread_rows(logits, unread)), dim=1)
    return {name: metric_values(metric, logits) for name, metric in metrics.items()}


def patch(lens: Any, clean: Any, corrupted: Any, metric: Metric, *, grid: str = "layer_head",
          layers: int | Iterable[int] | None = None, heads: int | Iterable[int] | None = None,
          align: str | Sequence[str] | None = None, batch_size: int = 16, progress: bool = True,
          also: Mapping[str, Metric] | None = None, tokens: Any = None) -> InterventionGrid:
    """The metric of the corrupted run with the clean run's positions written into one cell at a time.

    ``grid``: "layer" (all selected heads of a layer), "layer_head" or "layer_head_position" (one
    token of one head; for CoPE / GRAPE-AP, the token's row of gates or potentials). ``layers=None``:
    every learned layer. Prompts (text, token ids or Prompts) of equal length align token by token;
    otherwise pass ``align`` = span names (e.g. ["needle", "query", "answer"]). ``metric`` maps logits
    [batch, pos, vocab] to [batch] (see ``repo_lens.interventions.metrics``); ``also`` names further
    metrics measured on the same runs (their grids in ``result.also``). ``batch_size`` patched copies
    run per forward pass. ``tokens``: patch only these tokens of the corrupted prompt (a slice, indices,
    or a span name of a Prompt: "needle", "question", "~needle", "rest"; a pairwise quantity takes the
    entries whose query and key are both selected), to find which tokens' positions carry the effect.

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.interventions.metrics import logit_difference
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> result = patch(lens, "the cat sat", "the dog sat", logit_difference(99, 100), progress=False)
        >>> result.values.shape, bool(np.isnan(result.values[:2]).all())
        ((4, 4), True)
    """
    grid, batch_size = check_grid(grid), check_batch_size(batch_size)
    started = time.perf_counter()
    pair = prepare_pair(lens, clean, corrupted, metric, layers, heads, align, tokens)
    with torch.no_grad():
        metrics = {"metric": metric, **(also or {})}
        run = capture(lens.model, pair.corrupted.ids, pair.sites, inputs_from=pair.first_layer, prefix=pair.prefix,
                      rows_from=first_logit_row(list(metrics.values()), pair.corrupted.lengths[0]))
    patched = {site.layer: transplant(pair.clean_quantities[site.layer], run.quantities[site.layer], pair.mapping,
                                      site.edit.pairwise) for site in pair.sites}
    values, baselines = grid_values(lens, pair, run, patched, grid, metrics, batch_size, progress, "patching")
    return InterventionGrid("patch", grid, values.pop("metric"), baselines.pop("metric"), pair.clean_metric,
                            [s.layer for s in pair.sites], pair.head_list, round(time.perf_counter() - started, 4),
                            {"also_baseline": baselines} if also else {}, also=values)


def grid_values(lens: Any, pair: Pair, run: Captured, patched: dict[int, torch.Tensor], grid: str,
                metrics: Mapping[str, Metric], batch_size: int, progress: bool,
                what: str) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Each metric of every cell of ``grid`` with ``patched`` [1, head, pos (, pos)] written in its
    entries of the run ``run`` (captured with the pair's prefix, block inputs from the first site layer
    on), and each metric of the run itself."""
    baselines = {name: float(metric_values(metric, run.logits)[0]) for name, metric in metrics.items()}
    cells = grid_cells(grid, pair.sites, pair.head_list, pair.aligned_tokens)
    shape = (lens.n_layers, lens.n_heads, pair.corrupted.lengths[0])[:GRIDS.index(grid) + 1]
    values = {name: np.full(shape, np.nan) for name in metrics}
    chunks = [cells[first:first + batch_size] for first in range(0, len(cells), batch_size)]
    prefixes = _Prefixes(lens, pair)
    for chunk in tqdm(chunks, desc=f"{what} {grid}", unit="batch", disable=not progress):
        for name, result in run_cells(lens, pair, run, patched, chunk, metrics, prefixes).items():
            for cell, value in zip(chunk, result.tolist()):
                values[name][cell.index] = value
    return values, baselines
