"""The grids over one prompt: ``ablate``, ``ablated_positions`` and ``ablation_grid``.

``ablate`` replaces the positions of some layers and heads in one forward pass, ``ablated_positions`` returns
the edited positions themselves, and ``ablation_grid`` ablates one layer, head or token at a time, batched.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, overload

import numpy as np
import torch

from repo_lens.capture import position_hook_names
from repo_lens.errors import InputError
from repo_lens.interventions.edit_targets import Site, head_mask, select_sites, token_mask
from repo_lens.interventions.edits import (Mode, edit_values, keep_heads, keep_tokens, layer_seeds, parse_mode,
                                           prompt_seeds, token_orders)
from repo_lens.interventions.metrics import InterventionGrid, Metric, check_grid, first_logit_row, metric_values
from repo_lens.interventions.patching import Pair, grid_values
from repo_lens.interventions.runs import Batch, as_batch, as_single, capture, run_prefix
from repo_lens.protocol import check_batch_size
from repo_lens.validation import check_int, require_lens_model


def reference_means(lens: Any, reference: Any, sites: list[Site],
                    allow_beyond_context: bool = False) -> dict[int, torch.Tensor]:
    """Per site layer, the mean of its quantity over the ``reference`` inputs at each token index
    ([1, head, pos] or [1, head, pos, pos]; a padded row counts only up to its length)."""
    batch = as_batch(lens, reference, allow_beyond_context)
    with torch.no_grad():
        run = capture(lens.model, batch.ids, sites)
    lengths = torch.as_tensor(batch.lengths, device=batch.ids.device)
    valid = torch.arange(batch.ids.shape[1], device=batch.ids.device)[None, :] < lengths[:, None]  # [batch, pos]
    means = {}
    for site in sites:
        values = run.quantities[site.layer]
        mask = valid[:, None, :, None] if site.edit.pairwise else valid[:, None, :]
        mask = mask.to(values.dtype)
        means[site.layer] = (values * mask).sum(0, keepdim=True) / mask.sum(0, keepdim=True).clamp(min=1)
    return means


def checked_means(lens: Any, reference: Any, sites: list[Site], width: int,
                  allow_beyond_context: bool = False) -> dict[int, torch.Tensor]:
    """:func:`reference_means` for inputs of ``width`` tokens; a shorter reference set is an InputError."""
    means = reference_means(lens, reference, sites, allow_beyond_context)
    longest = next(iter(means.values())).shape[2]
    if width > longest:
        raise InputError(f"mean ablation of {width} tokens needs a reference set at least as long; its longest input "
                         f"has {longest} tokens")
    return means


def _edit_hook(site: Site, mode: Mode, heads: torch.Tensor, mean: torch.Tensor | None, orders: torch.Tensor | None,
               lengths: list[int], seeds: list[int], tokens: torch.Tensor | None):
    seeds = layer_seeds(seeds, site.layer)

    def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
        edited = edit_values(value, mode, site.edit, mean=mean, orders=orders, lengths=lengths, seeds=seeds)
        return keep_heads(keep_tokens(edited, value, tokens), value, heads)

    return hook


def edit_hooks(lens: Any, batch: Batch, mode: Mode, sites: list[Site],
               heads: torch.Tensor, reference: Any, seed: int, tokens: torch.Tensor | None = None,
               means: dict[int, torch.Tensor] | None = None,
               allow_beyond_context: bool = False) -> list[tuple[str, Any]]:
    """The forward hooks that apply ``mode`` at ``sites`` in the ``heads`` mask (and the ``tokens``
    mask [batch, width], None: every token), for the ``batch`` (its ids, padded, and their lengths)
    (``reference``: the inputs of "mean", or ``means``: their :func:`checked_means`, computed once).
    What "random", "shuffle" and "window" draw is seeded per prompt (``seed`` and the prompt's own
    tokens, :func:`repo_lens.interventions.edits.prompt_seeds`), so no prompt's edit depends on the batch."""
    inputs_width, lengths = batch.ids.shape[1], batch.lengths
    if mode.name == "mean" and means is None:
        means = checked_means(lens, reference, sites, inputs_width, allow_beyond_context)
    means = means or {}
    seeds = prompt_seeds(batch.ids, lengths, seed) if mode.name in ("random", "shuffle", "window") else [0] * len(lengths)
    orders = token_orders(mode, lengths, inputs_width, seeds)
    return [(site.hook, _edit_hook(site, mode, heads, means.get(site.layer), orders, lengths, seeds, tokens))
            for site in sites]


@overload
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: None = None, reference: Any = None,
           seed: int = 0, tokens: Any = None, allow_beyond_context: bool = False) -> torch.Tensor: ...
@overload
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: Metric, reference: Any = None,
           seed: int = 0, tokens: Any = None, allow_beyond_context: bool = False) -> np.ndarray: ...
@overload
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: Metric | None = None, reference: Any = None,
           seed: int = 0, tokens: Any = None, allow_beyond_context: bool = False) -> torch.Tensor | np.ndarray: ...
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: Metric | None = None, reference: Any = None,
           seed: int = 0, tokens: Any = None, allow_beyond_context: bool = False) -> torch.Tensor | np.ndarray:
    """Run ``inputs`` with the positions of ``layers`` × ``heads`` replaced, in one forward pass.

    ``mode``: "integer" (one unit per token, RoPE's positions), "constant" (no positional signal,
    NoPE-like), "mean" (each token index's mean over ``reference``, default the inputs themselves),
    "shuffle" (the tokens' values permuted, the same in every layer and head), ("window", w) (the
    same within consecutive blocks of w tokens, default 8), or ("interpolate", p):
    z' = (1 − p)·z + p·t in every selected layer of the same pass, as the RePo authors' forward applies
    ``dynamic_pe_pdrop`` (("interpolate", p, "constant") moves toward the constant). On the positions'
    own scale: "affine" (each head's least-squares line a + b·t), "rank" (order kept, spacing even over
    the head's range), "scaled" (the integers rescaled to the head's range: rising with the token index
    whatever the sign of the head's own slope) and "random" (a random direction of the "affine" edit's
    size, drawn anew in each layer and head). What "random", "shuffle" and "window" draw is seeded by
    ``seed`` and each prompt's own tokens (``repo_lens.interventions.edits.prompt_seeds``): a prompt's
    result is the same at any batch size and place in the batch. What integer and constant mean per
    mechanism, and how its positions are summed, comes from the registry
    (``repo_lens.model.registry.position_edit``).
    ``layers=None``: every learned layer (every layer of a model without learned positions).
    ``tokens``: edit only these tokens' entries (a slice, indices, a span name of a Prompt such as
    "needle", "~needle" or "rest"; see ``repo_lens.interventions.edit_targets``); the edit is computed over
    the whole prompt first.
    ``allow_beyond_context``: run inputs longer than the model's context (extrapolation beyond the
    trained length, as :meth:`Lens.trace` offers); otherwise they are an error.
    Returns the logits [batch, pos, vocab], or ``metric(logits)`` as a numpy array [batch].

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> ablate(lens, "a needle", mode="integer", heads=[0]).shape
        torch.Size([1, 8, 257])
        >>> bool(torch.equal(ablate(lens, "a needle", mode=("interpolate", 0.0)), lens.model(torch.tensor([list(b"a needle")]))))
        True
    """
    require_lens_model(lens, "ablate")
    parsed = parse_mode(mode)
    seed = check_int(seed, "seed", minimum=0)
    batch = as_batch(lens, inputs, allow_beyond_context)
    sites = select_sites(lens.model, layers)
    selected = token_mask(tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    hooks = edit_hooks(lens, batch, parsed, sites, head_mask(lens.model, heads),
                       inputs if reference is None else reference, seed, selected,
                       allow_beyond_context=allow_beyond_context)
    with torch.no_grad():
        logits = lens.model.run_with_hooks(batch.ids, fwd_hooks=hooks)
        if metric is None:
            return logits
        return metric_values(metric, logits).double().cpu().numpy()


def ablated_positions(lens: Any, inputs: Any, *, mode: str | tuple, layers: int | Iterable[int] | None = None,
                      heads: int | Iterable[int] | None = None, reference: Any = None, seed: int = 0,
                      tokens: Any = None, allow_beyond_context: bool = False) -> np.ndarray:
    """float32 (n_layers, n_heads, tokens): what ``lens.trace(inputs).positions`` would hold with the
    ablation of :func:`repo_lens.interventions.ablate` applied (later layers see the earlier layers'
    change; CoPE / GRAPE-AP layers as seen from the last token, as in a trace).

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> ablated_positions(lens, "a needle", mode="integer", layers=[2], heads=[1])[2, 1].tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    """
    require_lens_model(lens, "ablated_positions")
    parsed, seed = parse_mode(mode), check_int(seed, "seed", minimum=0)
    batch = as_single(lens, inputs, "inputs", allow_beyond_context)
    sites = select_sites(lens.model, layers)
    selected = token_mask(tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    hooks = edit_hooks(lens, batch, parsed, sites, head_mask(lens.model, heads),
                       inputs if reference is None else reference, seed, selected,
                       allow_beyond_context=allow_beyond_context)
    seen: dict[int, torch.Tensor] = {}

    def keep(layer: int):
        def hook(value: torch.Tensor, hook: Any) -> None:
            seen[layer] = value.detach().float()

        return hook

    hooks += [(name, keep(layer)) for layer, name in enumerate(position_hook_names(lens.model))]
    with torch.no_grad():
        lens.model.run_with_hooks(batch.ids, fwd_hooks=hooks)
    return torch.stack([seen[layer][0] for layer in range(len(seen))]).cpu().numpy().astype(np.float32)


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
    require_lens_model(lens, "ablation_grid")
    grid, batch_size, parsed = check_grid(grid), check_batch_size(batch_size), parse_mode(mode)
    seed = check_int(seed, "seed", minimum=0)
    started = time.perf_counter()
    batch = as_single(lens, inputs, "inputs")
    sites, heads_on = select_sites(lens.model, layers), head_mask(lens.model, heads)
    width = batch.lengths[0]
    means = checked_means(lens, inputs if reference is None else reference, sites, width) if parsed.name == "mean" else {}
    seeds = prompt_seeds(batch.ids, batch.lengths, seed)
    orders = token_orders(parsed, batch.lengths, width, seeds)
    selected = token_mask(tokens, batch.prompts, batch.lengths, width)
    pair = Pair(batch, batch, np.arange(width), sites, heads_on, {}, float("nan"), run_prefix(lens.model, batch.ids, 0))
    metrics = {"metric": metric, **(also or {})}
    with torch.no_grad():
        run = capture(lens.model, batch.ids, sites, inputs_from=sites[0].layer, prefix=pair.prefix,
                      rows_from=first_logit_row(list(metrics.values()), width))
    edited = {site.layer: keep_tokens(edit_values(run.quantities[site.layer], parsed, site.edit,
                                                  mean=means.get(site.layer), orders=orders, lengths=batch.lengths,
                                                  seeds=layer_seeds(seeds, site.layer)),
                                      run.quantities[site.layer], selected)
              for site in sites}
    values, baselines = grid_values(lens, pair, run, edited, grid, metrics, batch_size, progress, "ablating")
    every = float(ablate(lens, inputs, mode=parsed, layers=[site.layer for site in sites],
                         heads=pair.head_list, metric=metric, reference=reference, seed=seed, tokens=tokens)[0])
    meta = {"mode": parsed.label, **({"also_baseline": baselines} if also else {})}
    return InterventionGrid("ablate", grid, values.pop("metric"), baselines.pop("metric"), every,
                            [site.layer for site in sites], pair.head_list, round(time.perf_counter() - started, 4),
                            meta, also=values)
