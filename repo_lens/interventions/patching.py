"""The grids over a clean and a corrupted prompt: the pairs, ``patch`` and ``attribute``.

``prepare_pair`` runs a pair once; ``patch`` writes the clean positions into the corrupted run one grid cell
at a time; ``attribute`` estimates the same grid from one forward and one backward pass. Both run a repo_lens
:class:`repo_lens.Lens` through its hooks, or the generic Hugging Face lens (:class:`repo_lens.hf.HFLens`)
one layer at a time (:mod:`repo_lens.interventions.hf_grids`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from repo_lens.capture import forward_lock
from repo_lens.errors import InputError
from repo_lens.hf.model import HFLens
from repo_lens.interventions.edit_targets import Cell, Indices, Site, cell_mask, grid_cells, head_mask, select_sites
from repo_lens.interventions.edited_runs import (Batch, Captured, Hook, Inputs, Prefix, as_single, block_inputs,
                                                 capture_edited, first_changed, pair_mapping, run_from, run_prefix,
                                                 shared_prefix, suffix_inputs, transplant, with_unread_rows)
from repo_lens.interventions.edited_runs import span_names as span_names  # its home before edited_runs
from repo_lens.interventions.hf_grids import attribute_hf, patch_hf
from repo_lens.interventions.metrics import GRIDS, InterventionGrid, Metric, check_grid, first_logit_row, metric_values
from repo_lens.options import keyword_dataclass
from repo_lens.interventions.options import GridOptions, TokenSelection, old_call_forms
from repo_lens.model.cache import KVCache
from repo_lens.protocol import HookedLensProtocol, LensProtocol, require_hooked_lens


@keyword_dataclass
@dataclass(kw_only=True)
class Pair:
    """A clean and a corrupted prompt (batches of one), the clean index of each corrupted token
    (``mapping``, −1: none), the ``sites`` and ``heads`` (mask) patched, the clean run's quantities
    and its metric (NaN when the prompts differ in length), and the ``prefix`` both prompts share
    (run once; the clean run, the corrupted run and the patched copies continue it)."""

    clean: Batch
    corrupted: Batch
    mapping: np.ndarray
    sites: list[Site]
    heads: torch.Tensor
    clean_quantities: dict[int, torch.Tensor]
    clean_metric: float
    prefix: Prefix

    @property
    def first_layer(self) -> int:
        return self.sites[0].layer

    @property
    def aligned_tokens(self) -> list[int]:
        """The corrupted tokens that have a clean counterpart."""
        return np.flatnonzero(self.mapping >= 0).tolist()

    @property
    def head_list(self) -> list[int]:
        return torch.nonzero(self.heads).flatten().tolist()


def prepare_pair(lens: HookedLensProtocol, clean: Inputs, corrupted: Inputs, metric: Metric, layers: Indices,
                 heads: Indices, align: str | Sequence[str] | None, tokens: TokenSelection = None) -> Pair:
    """Check and align the pair, pick the sites, and run the clean prompt once (no gradient).
    ``tokens``: only these corrupted tokens take clean positions (see ``repo_lens.interventions.edit_targets``).

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> from repo_lens.interventions.metrics import logit_difference
    >>> pair = prepare_pair(Lens(tiny_model("repo"), ByteTokenizer()), "abc", "abd", logit_difference(1, 2), None, None,
    ...                     None)
    >>> pair.first_layer, pair.aligned_tokens, tuple(pair.clean_quantities[2].shape), pair.prefix.length
    (2, [0, 1, 2], (1, 4, 3), 2)
    """
    clean_batch, corrupted_batch = as_single(lens, clean, "clean"), as_single(lens, corrupted, "corrupted")
    mapping = pair_mapping(clean_batch, corrupted_batch, align, tokens)
    sites = select_sites(lens.model, layers)
    heads_on = head_mask(lens.model, heads)
    shared = shared_prefix(clean_batch.ids, corrupted_batch.ids, mapping)
    prefix = run_prefix(lens.model, corrupted_batch.ids, shared, sites)
    with torch.no_grad():
        same_length = clean_batch.lengths == corrupted_batch.lengths
        # prompts of other lengths: the metric reads other tokens, so only the positions are kept (and one row)
        rows_from = first_logit_row([metric], clean_batch.lengths[0]) if same_length else clean_batch.lengths[0] - 1
        run = capture_edited(lens.model, clean_batch.ids, sites, prefix=prefix, rows_from=rows_from)
        clean_metric = float(metric_values(metric, run.logits)[0]) if same_length else float("nan")
    return Pair(clean=clean_batch, corrupted=corrupted_batch, mapping=mapping, sites=sites, heads=heads_on,
                clean_quantities=run.quantities, clean_metric=clean_metric, prefix=prefix)


def _patch_hook(rows: slice, masks: torch.Tensor, patched: torch.Tensor) -> Any:
    """Write ``patched`` into rows ``rows`` of the quantity where ``masks`` [rows, …] is True."""
    def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
        out = value.clone()
        out[rows] = torch.where(masks, patched.to(value.dtype), value[rows])
        return out

    return hook


def _hooks(pair: Pair, patched: dict[int, torch.Tensor], chunk: Sequence[Cell], counts: dict[int, int],
           first: int) -> list[Hook]:
    """Per layer of ``chunk``, the hook that patches its cells' rows, for tokens ``first``.. only."""
    site_of = {site.layer: site for site in pair.sites}
    hooks: list[Hook] = []
    before = 0
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

    def __init__(self, lens: HookedLensProtocol, pair: Pair) -> None:
        self.lens, self.pair, self.last = lens, pair, pair.prefix

    def __call__(self, length: int) -> KVCache:
        if length == self.pair.prefix.length:
            return self.pair.prefix.cache
        if length != self.last.length:
            self.last = run_prefix(self.lens.model, self.pair.corrupted.ids, length)
        return self.last.cache


def run_cells(lens: HookedLensProtocol, pair: Pair, corrupted: Captured, patched: dict[int, torch.Tensor],
              chunk: Sequence[Cell], metrics: Mapping[str, Metric], prefixes: _Prefixes) -> dict[str, torch.Tensor]:
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


@old_call_forms(option_keywords=("align", "batch_size", "progress", "also", "tokens"))
def patch(lens: LensProtocol, clean: Inputs, corrupted: Inputs, metric: Metric, *, grid: str = "layer_head",
          layers: Indices = None, heads: Indices = None, options: GridOptions | None = None) -> InterventionGrid:
    """The metric of the corrupted run with the clean run's positions written into one cell at a time.

    ``grid``: "layer" (all selected heads of a layer), "layer_head" or "layer_head_position" (one
    token of one head; for CoPE / GRAPE-AP, the token's row of gates or potentials). ``layers=None``:
    every learned layer. ``metric`` maps logits [batch, pos, vocab] to [batch] (see
    ``repo_lens.interventions.metrics``). ``options``: :class:`GridOptions`. Prompts (text, token ids or
    Prompts) of equal length align token by token; otherwise pass ``align`` = span names (e.g.
    ["needle", "query", "answer"]). ``also`` names further metrics measured on the same runs (their grids
    in ``result.also``). ``batch_size`` patched copies run per forward pass. ``tokens``: patch only these
    tokens of the corrupted prompt (a slice, indices, or a span name of a Prompt: "needle", "question",
    "answer", "~needle", "rest"; a pairwise quantity takes the entries whose query and key are both
    selected), to find which tokens' positions carry the effect. Spans chosen by name (and ``align=None``)
    take their own clean positions wherever they sit in the clean prompt: with the needle moved,
    ``tokens="needle"`` writes the clean needle's positions into the moved needle, not those of the
    haystack tokens at the moved needle's indices. On an HFLens, ``grid="layer"`` only.

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.interventions.metrics import logit_difference
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> result = patch(lens, "the cat sat", "the dog sat", logit_difference(99, 100),
        ...                options=GridOptions(progress=False))
        >>> result.values.shape, bool(np.isnan(result.values[:2]).all())
        ((4, 4), True)
    """
    grid, options = check_grid(grid), options or GridOptions()
    if isinstance(lens, HFLens):
        return patch_hf(lens, clean, corrupted, metric, grid, layers, heads, options)
    native = require_hooked_lens(lens, "patch")
    started = time.perf_counter()
    pair = prepare_pair(native, clean, corrupted, metric, layers, heads, options.align, options.tokens)
    with torch.no_grad():
        metrics = {"metric": metric, **(options.also or {})}
        run = capture_edited(native.model, pair.corrupted.ids, pair.sites, inputs_from=pair.first_layer,
                             prefix=pair.prefix,
                             rows_from=first_logit_row(list(metrics.values()), pair.corrupted.lengths[0]))
    patched = {site.layer: transplant(pair.clean_quantities[site.layer], run.quantities[site.layer], pair.mapping,
                                      site.edit.pairwise) for site in pair.sites}
    values, baselines = grid_values(native, pair, run, patched, grid, metrics, options=options, what="patching")
    return InterventionGrid(method="patch", grid=grid, values=values.pop("metric"), baseline=baselines.pop("metric"),
                            clean=pair.clean_metric, layers=[s.layer for s in pair.sites], heads=pair.head_list,
                            seconds=round(time.perf_counter() - started, 4),
                            meta={"also_baseline": baselines} if options.also else {}, also=values)


@old_call_forms(keep=6, positional=("batch_size", "progress", "what"), option_keywords=("batch_size", "progress"))
def grid_values(lens: HookedLensProtocol, pair: Pair, run: Captured, patched: dict[int, torch.Tensor],
                grid: str, metrics: Mapping[str, Metric], *, options: GridOptions,
                what: str) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Each metric of every cell of ``grid`` with ``patched`` [1, head, pos (, pos)] written in its
    entries of the run ``run`` (captured with the pair's prefix, block inputs from the first site layer
    on), and each metric of the run itself; ``options.batch_size`` cells a pass, ``what`` names the progress bar."""
    baselines = {name: float(metric_values(metric, run.logits)[0]) for name, metric in metrics.items()}
    cells = grid_cells(grid, pair.sites, pair.head_list, pair.aligned_tokens)
    shape = (lens.n_layers, lens.n_heads, pair.corrupted.lengths[0])[:GRIDS.index(grid) + 1]
    values = {name: np.full(shape, np.nan) for name in metrics}
    size = options.batch_size
    chunks = [cells[first:first + size] for first in range(0, len(cells), size)]
    prefixes = _Prefixes(lens, pair)
    for chunk in tqdm(chunks, desc=f"{what} {grid}", unit="batch", disable=not options.progress):
        for name, result in run_cells(lens, pair, run, patched, chunk, metrics, prefixes).items():
            for cell, value in zip(chunk, result.tolist()):
                values[name][cell.index] = value
    return values, baselines


def _gradients(lens: HookedLensProtocol, pair: Pair,
               metric: Metric) -> tuple[float, dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """The corrupted run's metric, and per site layer its quantity (every token) and the metric's
    gradient there (the tokens after the shared prefix, whose quantities the clean run can change)."""
    model, first, prefix = lens.model, pair.first_layer, pair.prefix
    with torch.no_grad():
        start = block_inputs(model, pair.corrupted.ids[:, prefix.length:], first, cache=prefix.fresh_cache())
    seen: dict[int, torch.Tensor] = {}
    leaves: dict[int, torch.Tensor] = {}

    def leaf_hook(layer: int):
        def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
            seen[layer] = value.detach()
            leaves[layer] = torch.zeros_like(value, requires_grad=True)
            return value + leaves[layer]  # d metric / d leaf = d metric / d value, downstream paths included

        return hook

    hooks: list[Hook] = [(site.hook, leaf_hook(site.layer)) for site in pair.sites]
    rest = suffix_inputs(prefix.cache, start[-1], prefix.length)
    unread = max(0, first_logit_row([metric], pair.corrupted.lengths[0]) - prefix.length)
    with torch.enable_grad(), forward_lock(model), model.hooks(fwd_hooks=hooks):
        logits = run_from(model, first, start[0], rest, rows_from=unread)
        logits = with_unread_rows(logits, unread)
        if prefix.length:
            assert prefix.logits is not None  # a computed prefix has its logits
            logits = torch.cat((prefix.logits, logits), dim=1)
        values = metric_values(metric, logits)
        if not values.requires_grad:
            raise InputError("attribute needs a differentiable metric (a torch expression of the logits, e.g. "
                             "answer_logprob or logit_difference); niah_exact_match and numpy metrics have no "
                             "gradient: use patch for them")
        layers = [site.layer for site in pair.sites]
        grads = torch.autograd.grad(values.sum(), [leaves[layer] for layer in layers], allow_unused=True)
    gradients = {layer: torch.zeros_like(seen[layer]) if grad is None else grad for layer, grad in zip(layers, grads)}
    quantities = {site.layer: prefix.full(site.layer, seen[site.layer], site.edit.pairwise) for site in pair.sites}
    return float(values[0].detach()), quantities, gradients


def _per_token(pair: Pair, site: Site, corrupted: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """[head, pos] estimated effect of each token's entries (0 in the unselected heads and the shared prefix)."""
    moved = transplant(pair.clean_quantities[site.layer], corrupted, pair.mapping, site.edit.pairwise)
    change = (moved - corrupted)[:, :, pair.prefix.length:]
    contribution = (gradient * change)[0].double()
    if site.edit.pairwise:
        contribution = contribution.sum(-1)  # a token's row of the query × key quantity
    per_token = torch.zeros(contribution.shape[0], corrupted.shape[2], dtype=torch.float64)
    per_token[:, pair.prefix.length:] = contribution.cpu()
    return torch.where(pair.heads[:, None], per_token, 0.0)


@old_call_forms(option_keywords=("align", "tokens"))
def attribute(lens: LensProtocol, clean: Inputs, corrupted: Inputs, metric: Metric, *, grid: str = "layer_head",
              layers: Indices = None, heads: Indices = None, options: GridOptions | None = None) -> InterventionGrid:
    """The gradient estimate of :func:`repo_lens.interventions.patch`'s grid (same arguments, same
    layout; ``values`` = baseline + estimated effect), from one forward and one backward pass of the
    corrupted prompt from the first selected layer. Exact where the metric is linear in the positions.
    ``options``: :class:`GridOptions` (``tokens``: only these tokens' positions are patched, ``align``, as
    in :func:`repo_lens.interventions.patch`; ``batch_size`` and ``also`` are for the patched grids).
    On an HFLens, ``grid="layer"`` only.

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.interventions.metrics import logit_difference
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> estimate = attribute(lens, "the cat sat", "the dog sat", logit_difference(99, 100), grid="layer")
        >>> estimate.method, estimate.values.shape
        ('attribute', (4,))
    """
    grid, options = check_grid(grid), options or GridOptions()
    options.refuse("attribute", "batch_size", "also")
    if isinstance(lens, HFLens):
        return attribute_hf(lens, clean, corrupted, metric, grid, layers, heads, options)
    native = require_hooked_lens(lens, "attribute")
    started = time.perf_counter()
    with torch.inference_mode(False):  # a backward pass, also when called under torch.inference_mode()
        pair = prepare_pair(native, clean, corrupted, metric, layers, heads, options.align, options.tokens)
        baseline, quantities, gradients = _gradients(native, pair, metric)
    values = np.full((native.n_layers, native.n_heads, pair.corrupted.lengths[0])[:GRIDS.index(grid) + 1], np.nan)
    heads_on, tokens = pair.head_list, pair.aligned_tokens
    for site in pair.sites:
        per_token = _per_token(pair, site, quantities[site.layer], gradients[site.layer]).numpy()
        if grid == "layer":
            values[site.layer] = baseline + per_token.sum()
        elif grid == "layer_head":
            values[site.layer, heads_on] = baseline + per_token.sum(-1)[heads_on]
        else:
            values[site.layer][np.ix_(heads_on, tokens)] = baseline + per_token[np.ix_(heads_on, tokens)]
    return InterventionGrid(method="attribute", grid=grid, values=values, baseline=baseline, clean=pair.clean_metric,
                            layers=[s.layer for s in pair.sites], heads=pair.head_list,
                            seconds=round(time.perf_counter() - started, 4))
