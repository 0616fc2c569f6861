"""The grids over one prompt: ``ablate``, ``ablated_positions`` and ``ablation_grid``.

``ablate`` replaces the positions of some layers and heads in one forward pass, ``ablated_positions`` returns
the edited positions themselves, and ``ablation_grid`` ablates one layer, head or token at a time, batched.
Each runs a repo_lens :class:`repo_lens.Lens` through its hooks, or the generic Hugging Face lens
(:class:`repo_lens.hf.HFLens`) through the position_ids its rotary embedding reads
(:mod:`repo_lens.interventions.hf_positions`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from repo_lens.capture import position_hook_names
from repo_lens.errors import InputError
from repo_lens.hf.model import HFLens
from repo_lens.interventions.edit_targets import Indices, Site, head_mask, select_sites, token_mask
from repo_lens.interventions.edited_runs import (Batch, Hook, Inputs, as_batch, as_single, capture_edited,
                                                 run_prefix)
from repo_lens.interventions.edits import edit_values, keep_heads, keep_tokens, layer_seeds, prompt_seeds, token_orders
from repo_lens.interventions.hf_grids import ablation_grid_hf
from repo_lens.interventions.hf_positions import ablate_hf, ablated_positions_hf
from repo_lens.interventions.metrics import InterventionGrid, Metric, check_grid, first_logit_row, metric_values
from repo_lens.interventions.modes import Mean, Mode, ModeName, parse_mode
from repo_lens.interventions.options import GridOptions, TokenSelection, old_call_forms
from repo_lens.interventions.patching import Pair, grid_values
from repo_lens.model.transformer import LensModel
from repo_lens.protocol import HookedLensProtocol, LensProtocol, require_hooked_lens


def native_lens(lens: LensProtocol, what: str) -> tuple[HookedLensProtocol, LensModel]:
    """``lens`` and its repo_lens model, or the InputError of :func:`repo_lens.protocol.require_hooked_lens`."""
    hooked = require_hooked_lens(lens, what)
    return hooked, hooked.model


def reference_means(lens: HookedLensProtocol, reference: Inputs, sites: list[Site],
                    allow_beyond_context: bool = False) -> dict[int, torch.Tensor]:
    """Per site layer, the mean of its quantity over the ``reference`` inputs at each token index
    ([1, head, pos] or [1, head, pos, pos]; a padded row counts only up to its length)."""
    batch = as_batch(lens, reference, allow_beyond_context)
    with torch.no_grad():
        run = capture_edited(lens.model, batch.ids, sites)
    lengths = torch.as_tensor(batch.lengths, device=batch.ids.device)
    valid = torch.arange(batch.ids.shape[1], device=batch.ids.device)[None, :] < lengths[:, None]  # [batch, pos]
    means = {}
    for site in sites:
        values = run.quantities[site.layer]
        mask = valid[:, None, :, None] if site.edit.pairwise else valid[:, None, :]
        mask = mask.to(values.dtype)
        means[site.layer] = (values * mask).sum(0, keepdim=True) / mask.sum(0, keepdim=True).clamp(min=1)
    return means


def checked_means(lens: HookedLensProtocol, reference: Inputs, sites: list[Site], width: int,
                  allow_beyond_context: bool = False) -> dict[int, torch.Tensor]:
    """:func:`reference_means` for inputs of ``width`` tokens; a shorter reference set is an InputError."""
    means = reference_means(lens, reference, sites, allow_beyond_context)
    longest = next(iter(means.values())).shape[2]
    if width > longest:
        raise InputError(f"mean ablation of {width} tokens needs a reference set at least as long; its longest input "
                         f"has {longest} tokens")
    return means


def mode_means(lens: HookedLensProtocol, mode: Mode, inputs: Inputs, sites: list[Site], width: int,
               allow_beyond_context: bool = False) -> dict[int, torch.Tensor] | None:
    """The reference means of a :class:`Mean` mode (its ``reference``, or else ``inputs``); None for other modes."""
    if not isinstance(mode, Mean):
        return None
    reference = inputs if mode.reference is None else mode.reference
    return checked_means(lens, reference, sites, width, allow_beyond_context)


def _edit_hook(site: Site, mode: Mode, heads: torch.Tensor, mean: torch.Tensor | None, orders: torch.Tensor | None,
               lengths: list[int], seeds: list[int], tokens: torch.Tensor | None) -> Any:
    seeds = layer_seeds(seeds, site.layer)

    def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
        edited = edit_values(value, mode, site.edit, mean=mean, orders=orders, lengths=lengths, seeds=seeds)
        return keep_heads(keep_tokens(edited, value, tokens), value, heads)

    return hook


@old_call_forms(keep=5, positional=("reference", "seed", "tokens", "means", "allow_beyond_context"),
                mode_keywords=("seed", "reference"), mode_at=2)
def edit_hooks(lens: HookedLensProtocol, batch: Batch, mode: Mode, sites: list[Site], heads: torch.Tensor, *,
               tokens: torch.Tensor | None = None, means: dict[int, torch.Tensor] | None = None,
               allow_beyond_context: bool = False) -> list[Hook]:
    """The forward hooks that apply ``mode`` at ``sites`` in the ``heads`` mask (and the ``tokens``
    mask [batch, width], None: every token), for the ``batch`` (its ids, padded, and their lengths).
    A :class:`Mean` mode needs its reference means: ``means`` (:func:`checked_means`, computed once) or
    the mode's own ``reference`` (computed here). What :class:`Random`, :class:`Shuffle` and :class:`Window`
    draw is seeded per prompt (the mode's ``seed`` and the prompt's own tokens,
    :func:`repo_lens.interventions.edits.prompt_seeds`), so no prompt's edit depends on the batch."""
    inputs_width, lengths = batch.ids.shape[1], batch.lengths
    if isinstance(mode, Mean) and means is None:
        if mode.reference is None:
            raise InputError("edit_hooks of Mean() needs the reference means: pass means=checked_means(lens, inputs, "
                             "sites, width), or a mode Mean(reference=inputs)")
        means = checked_means(lens, mode.reference, sites, inputs_width, allow_beyond_context)
    means = means or {}
    seeds = prompt_seeds(batch.ids, lengths, getattr(mode, "seed", 0)) if mode.draws else [0] * len(lengths)
    orders = token_orders(mode, lengths, inputs_width, seeds)
    return [(site.hook, _edit_hook(site, mode, heads, means.get(site.layer), orders, lengths, seeds, tokens))
            for site in sites]


def _native_edit(lens: LensProtocol, inputs: Inputs, mode: Mode, layers: Indices, heads: Indices,
                 tokens: TokenSelection, allow_beyond_context: bool, what: str) -> tuple[LensModel, Batch, list[Hook]]:
    """The model, the batch and the edit's hooks of :func:`ablate` and :func:`ablated_positions` on a Lens."""
    native, model = native_lens(lens, what)
    if what == "ablated_positions":  # the positions of one prompt
        batch = as_single(native, inputs, "inputs", allow_beyond_context)
    else:
        batch = as_batch(native, inputs, allow_beyond_context)
    sites = select_sites(model, layers)
    selected = token_mask(tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    means = mode_means(native, mode, inputs, sites, batch.ids.shape[1], allow_beyond_context)
    return model, batch, edit_hooks(native, batch, mode, sites, head_mask(model, heads), tokens=selected, means=means,
                                    allow_beyond_context=allow_beyond_context)


@old_call_forms(mode_keywords=("seed", "reference"))
def ablate(lens: LensProtocol, inputs: Inputs, *, mode: Mode | ModeName, layers: Indices = None, heads: Indices = None,
           metric: Metric | None = None, tokens: TokenSelection = None,
           allow_beyond_context: bool = False) -> torch.Tensor | np.ndarray:
    """Run ``inputs`` with the positions of ``layers`` × ``heads`` replaced, in one forward pass.

    ``mode``: what replaces them, a mode of :mod:`repo_lens.interventions.modes` (or the name of one without
    settings, e.g. "integer"): ``Integer()`` (one unit per token, RoPE's positions), ``Constant()`` (no
    positional signal, NoPE-like), ``Mean(reference=...)`` (each token index's mean over the reference inputs,
    default the inputs themselves), ``Shuffle(seed=...)`` (the tokens' values permuted, the same in every
    layer and head), ``Window(width=8)`` (the same within consecutive blocks of w tokens),
    ``Interpolate(p=..., toward="integer")``: z' = (1 − p)·z + p·t in every selected layer of the same pass,
    as the RePo authors' forward applies ``dynamic_pe_pdrop`` (toward="constant" moves toward the constant);
    on the positions' own scale ``Affine()`` (each head's least-squares line a + b·t), ``Rank()`` (order
    kept, spacing even over the head's range), ``Scaled()`` (the integers rescaled to the head's range:
    rising with the token index whatever the sign of the head's own slope), ``Random(seed=...)`` (a random
    direction of the affine edit's size, drawn anew in each layer and head), ``Shift(offset=...)`` and
    ``Stretch(factor=...)`` (every position moved, or every distance multiplied). What the random modes
    draw is seeded by their ``seed`` and each prompt's own tokens: a prompt's result is the same at any
    batch size and place in the batch. What integer and constant mean per mechanism, and how its positions
    are summed, comes from the registry (``repo_lens.model.registry.position_edit``).
    ``layers=None``: every learned layer (every layer of a model without learned positions).
    ``tokens``: edit only these tokens' entries (a slice, indices, a span name of a Prompt such as
    "needle", "~needle" or "rest"; see ``repo_lens.interventions.edit_targets``); the edit is computed over
    the whole prompt first.
    ``allow_beyond_context``: run inputs longer than the model's context (extrapolation beyond the
    trained length, as :meth:`repo_lens.Lens.trace` offers); otherwise they are an error.
    On an :class:`repo_lens.hf.HFLens` the positions are the position_ids of its rotary embedding, shared by
    every head: ``heads`` must be None, ``layers=None`` writes them once for every layer
    (:mod:`repo_lens.interventions.hf_positions`).
    Returns the logits [batch, pos, vocab], or ``metric(logits)`` as a numpy array [batch].

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.interventions.modes import Integer, Interpolate
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> ablate(lens, "a needle", mode=Integer(), heads=[0]).shape
        torch.Size([1, 8, 257])
        >>> bool(torch.equal(ablate(lens, "a needle", mode=Interpolate(p=0.0)), lens.model(torch.tensor([list(b"a needle")]))))
        True
    """
    parsed = parse_mode(mode)
    if isinstance(lens, HFLens):
        logits = ablate_hf(lens, inputs, parsed, layers, heads, tokens, allow_beyond_context)
    else:
        model, batch, hooks = _native_edit(lens, inputs, parsed, layers, heads, tokens, allow_beyond_context, "ablate")
        with torch.no_grad():
            logits = model.run_with_hooks(batch.ids, fwd_hooks=hooks)
    if metric is None:
        return logits
    with torch.no_grad():
        return metric_values(metric, logits).double().cpu().numpy()


@old_call_forms(mode_keywords=("seed", "reference"))
def ablated_positions(lens: LensProtocol, inputs: Inputs, *, mode: Mode | ModeName, layers: Indices = None,
                      heads: Indices = None, tokens: TokenSelection = None,
                      allow_beyond_context: bool = False) -> np.ndarray:
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
    parsed = parse_mode(mode)
    if isinstance(lens, HFLens):
        return ablated_positions_hf(lens, inputs, parsed, layers, heads, tokens, allow_beyond_context)
    model, batch, hooks = _native_edit(lens, inputs, parsed, layers, heads, tokens, allow_beyond_context,
                                       "ablated_positions")
    seen: dict[int, torch.Tensor] = {}

    def keep(layer: int) -> Any:
        def hook(value: torch.Tensor, hook: Any) -> None:
            seen[layer] = value.detach().float()

        return hook

    hooks += [(name, keep(layer)) for layer, name in enumerate(position_hook_names(model))]
    with torch.no_grad():
        model.run_with_hooks(batch.ids, fwd_hooks=hooks)
    return torch.stack([seen[layer][0] for layer in range(len(seen))]).cpu().numpy().astype(np.float32)


@old_call_forms(mode_keywords=("seed", "reference"), option_keywords=("tokens", "batch_size", "progress", "also"))
def ablation_grid(lens: LensProtocol, inputs: Inputs, metric: Metric, *, mode: Mode | ModeName,
                  grid: str = "layer_head", layers: Indices = None, heads: Indices = None,
                  options: GridOptions | None = None) -> InterventionGrid:
    """The metric of one prompt with one cell's positions ablated (``mode`` as in :func:`ablate`), for
    every cell of ``grid``; ``baseline`` is the unablated metric, ``clean`` the metric with every
    selected layer and head ablated at once. ``options``: :class:`GridOptions` (``tokens``: ablate only
    these tokens' entries in every cell, as in :func:`ablate`; ``also``: further metrics of the same runs,
    in ``result.also``; ``batch_size``, ``progress``). On an HFLens, ``grid="layer"`` only.

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.interventions.metrics import logit_difference
        >>> lens = Lens(tiny_model("repo"), ByteTokenizer())
        >>> metric = logit_difference(99, 100)
        >>> cells = ablation_grid(lens, "the cat sat", metric, mode="constant", options=GridOptions(progress=False))
        >>> one = ablate(lens, "the cat sat", mode="constant", layers=[3], heads=[1], metric=metric)[0]
        >>> cells.values.shape, bool(abs(cells.values[3, 1] - one) < 1e-4)
        ((4, 4), True)
    """
    grid, parsed, options = check_grid(grid), parse_mode(mode), options or GridOptions()
    options.refuse("ablation_grid", "align")
    if isinstance(lens, HFLens):
        return ablation_grid_hf(lens, inputs, metric, parsed, grid, layers, heads, options)
    native, model = native_lens(lens, "ablation_grid")
    started = time.perf_counter()
    batch = as_single(native, inputs, "inputs")
    sites, heads_on = select_sites(model, layers), head_mask(model, heads)
    width = batch.lengths[0]
    means = mode_means(native, parsed, inputs, sites, width) or {}
    seeds = prompt_seeds(batch.ids, batch.lengths, getattr(parsed, "seed", 0))
    orders = token_orders(parsed, batch.lengths, width, seeds)
    selected = token_mask(options.tokens, batch.prompts, batch.lengths, width)
    pair = Pair(clean=batch, corrupted=batch, mapping=np.arange(width), sites=sites, heads=heads_on,
                clean_quantities={}, clean_metric=float("nan"), prefix=run_prefix(model, batch.ids, 0))
    metrics = {"metric": metric, **(options.also or {})}
    with torch.no_grad():
        run = capture_edited(model, batch.ids, sites, inputs_from=sites[0].layer, prefix=pair.prefix,
                             rows_from=first_logit_row(list(metrics.values()), width))
    edited = {site.layer: keep_tokens(edit_values(run.quantities[site.layer], parsed, site.edit,
                                                  mean=means.get(site.layer), orders=orders, lengths=batch.lengths,
                                                  seeds=layer_seeds(seeds, site.layer)),
                                      run.quantities[site.layer], selected)
              for site in sites}
    values, baselines = grid_values(native, pair, run, edited, grid, metrics, options=options, what="ablating")
    every = float(ablate(lens, inputs, mode=parsed, layers=[site.layer for site in sites], heads=pair.head_list,
                         metric=metric, tokens=options.tokens)[0])
    meta = {"mode": parsed.label, **({"also_baseline": baselines} if options.also else {})}
    return InterventionGrid(method="ablate", grid=grid, values=values.pop("metric"), baseline=baselines.pop("metric"),
                            clean=every, layers=[site.layer for site in sites], heads=pair.head_list,
                            seconds=round(time.perf_counter() - started, 4), meta=meta, also=values)
