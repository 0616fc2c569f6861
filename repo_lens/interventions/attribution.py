"""``attribute``: attribution patching, the first-order estimate of every cell's patching effect from
one forward and one backward pass: effect ≈ ∂metric/∂q · (q_clean − q_corrupted), summed over the
cell's entries of the position quantity q (Nanda's attribution patching, on positions)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from repo_lens.capture import forward_lock
from repo_lens.errors import InputError
from repo_lens.interventions.alignment import transplant
from repo_lens.interventions.metrics import Metric, first_logit_row, metric_values
from repo_lens.interventions.pairs import Pair, prepare_pair
from repo_lens.interventions.prefix import suffix_inputs
from repo_lens.interventions.results import GRIDS, InterventionGrid, check_grid
from repo_lens.interventions.runs import block_inputs, run_from, with_unread_rows


def _gradients(lens: Any, pair: Pair, metric: Metric) -> tuple[float, dict[int, torch.Tensor], dict[int, torch.Tensor]]:
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

    hooks = [(site.hook, leaf_hook(site.layer)) for site in pair.sites]
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
                         "answer_logprob or logit_difference); niah_exact_match and numpy metrics have no gradient: "
                         "use patch for them")
    layers = [site.layer for site in pair.sites]
    grads = torch.autograd.grad(values.sum(), [leaves[layer] for layer in layers], allow_unused=True)
    gradients = {layer: torch.zeros_like(seen[layer]) if grad is None else grad for layer, grad in zip(layers, grads)}
    quantities = {site.layer: prefix.full(site.layer, seen[site.layer], site.edit.pairwise) for site in pair.sites}
    return float(values[0].detach()), quantities, gradients


def _per_token(pair: Pair, site: Any, corrupted: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """[head, pos] estimated effect of each token's entries (0 in the unselected heads and the shared prefix)."""
    moved = transplant(pair.clean_quantities[site.layer], corrupted, pair.mapping, site.edit.pairwise)
    change = (moved - corrupted)[:, :, pair.prefix.length:]
    contribution = (gradient * change)[0].double()
    if site.edit.pairwise:
        contribution = contribution.sum(-1)  # a token's row of the query × key quantity
    per_token = torch.zeros(contribution.shape[0], corrupted.shape[2], dtype=torch.float64)
    per_token[:, pair.prefix.length:] = contribution.cpu()
    return torch.where(pair.heads[:, None], per_token, 0.0)


def attribute(lens: Any, clean: Any, corrupted: Any, metric: Metric, *, grid: str = "layer_head",
              layers: int | Iterable[int] | None = None, heads: int | Iterable[int] | None = None,
              align: str | Sequence[str] | None = None, tokens: Any = None) -> InterventionGrid:
    """The gradient estimate of :func:`repo_lens.interventions.patch`'s grid (same arguments, same
    layout; ``values`` = baseline + estimated effect), from one forward and one backward pass of the
    corrupted prompt from the first selected layer. Exact where the metric is linear in the positions.
    ``tokens``: only these tokens' positions are patched (as in :func:`repo_lens.interventions.patch`).

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
    grid = check_grid(grid)
    started = time.perf_counter()
    pair = prepare_pair(lens, clean, corrupted, metric, layers, heads, align, tokens)
    baseline, quantities, gradients = _gradients(lens, pair, metric)
    values = np.full((lens.n_layers, lens.n_heads, pair.corrupted.lengths[0])[:GRIDS.index(grid) + 1], np.nan)
    heads, tokens = pair.head_list, pair.aligned_tokens
    for site in pair.sites:
        per_token = _per_token(pair, site, quantities[site.layer], gradients[site.layer]).numpy()
        if grid == "layer":
            values[site.layer] = baseline + per_token.sum()
        elif grid == "layer_head":
            values[site.layer, heads] = baseline + per_token.sum(-1)[heads]
        else:
            values[site.layer][np.ix_(heads, tokens)] = baseline + per_token[np.ix_(heads, tokens)]
    return InterventionGrid("attribute", grid, values, baseline, pair.clean_metric, [s.layer for s in pair.sites],
                            pair.head_list, round(time.perf_counter() - started, 4))
