"""``ablation_grid``: ablate one cell (layer, head or token) at a time, every cell batched.

Ablating one layer leaves that layer's input unchanged, so the positions the ablation replaces are
the unablated run's: the edited values of every cell are known from one run, and the cells run
through :mod:`repo_lens.interventions.patching`'s engine (batched copies from the cached residual
stream at the cell's layer, the tokens before the first changed one taken from the cache). Each
cell equals ``ablate(lens, inputs, mode=mode, layers=[layer], heads=[head])`` (for "layer" cells,
every selected head; for tokens, that token alone).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from repo_lens.interventions.ablate import ablate, checked_means
from repo_lens.interventions.batch import as_single
from repo_lens.interventions.edits import edit_values, keep_tokens, token_orders
from repo_lens.interventions.metrics import Metric, first_logit_row
from repo_lens.interventions.modes import parse_mode
from repo_lens.interventions.pairs import Pair
from repo_lens.interventions.patching import grid_values
from repo_lens.interventions.prefix import run_prefix
from repo_lens.interventions.results import InterventionGrid, check_grid
from repo_lens.interventions.runs import capture
from repo_lens.interventions.selection import head_mask, select_sites
from repo_lens.interventions.tokens import token_mask
from repo_lens.protocol import check_batch_size
from repo_lens.validation import check_int


def ablation_grid(lens: Any, inputs: Any, metric: Metric, *, mode: str | tuple, grid: str = "layer_head",
                  layers: int | Iterable[int] | None = None, heads: int | Iterable[int] | None = None,
                  reference: Any = None, seed: int = 0, batch_size: int = 16, progress: bool = True,
                  also: Mapping[str, Metric] | None = None, tokens: Any = None) -> InterventionGrid:
    """The metric of one prompt with one cell's positions ablated (``mode`` as in :func:`ablate`), for
    every cell of ``grid``; ``baseline`` is the unablated metric, ``clean`` the metric with every
    selected layer and head ablated at once; ``also``: further metrics of the same runs (``result.also``);
    ``tokens``: ablate only these tokens' entries in every cell (as in :func:`ablate`).

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.interventions.metrics import logit_difference
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> metric = logit_difference(99, 100)
        >>> cells = ablation_grid(lens, "the cat sat", metric, mode="constant", progress=False)
        >>> one = ablate(lens, "the cat sat", mode="constant", layers=[3], heads=[1], metric=metric)[0]
        >>> cells.values.shape, bool(abs(cells.values[3, 1] - one) < 1e-4)
        ((4, 4), True)
    """
    grid, batch_size, parsed = check_grid(grid), check_batch_size(batch_size), parse_mode(mode)
    seed = check_int(seed, "seed", minimum=0)
    started = time.perf_counter()
    batch = as_single(lens, inputs, "inputs")
    sites, heads_on = select_sites(lens.model, layers), head_mask(lens.model, heads)
    width = batch.lengths[0]
    means = checked_means(lens, inputs if reference is None else reference, sites, width) if parsed.name == "mean" else {}
    orders = token_orders(parsed, batch.lengths, width, seed)
    selected = token_mask(tokens, batch.prompts, batch.lengths, width)
    pair = Pair(batch, batch, np.arange(width), sites, heads_on, {}, float("nan"), run_prefix(lens.model, batch.ids, 0))
    metrics = {"metric": metric, **(also or {})}
    with torch.no_grad():
        run = capture(lens.model, batch.ids, sites, inputs_from=sites[0].layer, prefix=pair.prefix,
                      rows_from=first_logit_row(list(metrics.values()), width))
    edited = {site.layer: keep_tokens(edit_values(run.quantities[site.layer], parsed, site.edit,
                                                  mean=means.get(site.layer), orders=orders, lengths=batch.lengths,
                                                  seed=seed + site.layer), run.quantities[site.layer], selected)
              for site in sites}
    values, baselines = grid_values(lens, pair, run, edited, grid, metrics, batch_size, progress, "ablating")
    every = float(ablate(lens, inputs, mode=parsed, layers=[site.layer for site in sites],
                         heads=pair.head_list, metric=metric, reference=reference, seed=seed, tokens=tokens)[0])
    meta = {"mode": parsed.label, **({"also_baseline": baselines} if also else {})}
    return InterventionGrid("ablate", grid, values.pop("metric"), baselines.pop("metric"), every,
                            [site.layer for site in sites], pair.head_list, round(time.perf_counter() - started, 4),
                            meta, also=values)

