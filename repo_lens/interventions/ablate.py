"""``ablate``: replace the learned positions of some layers and heads, in one forward pass."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, overload

import numpy as np
import torch

from repo_lens.errors import InputError
from repo_lens.interventions.batch import as_batch
from repo_lens.interventions.edits import edit_values, keep_heads, keep_tokens, token_orders
from repo_lens.interventions.metrics import Metric, metric_values
from repo_lens.interventions.modes import Mode, parse_mode
from repo_lens.interventions.runs import capture
from repo_lens.interventions.selection import Site, head_mask, select_sites
from repo_lens.interventions.tokens import token_mask
from repo_lens.validation import check_int


def reference_means(lens: Any, reference: Any, sites: list[Site]) -> dict[int, torch.Tensor]:
    """Per site layer, the mean of its quantity over the ``reference`` inputs at each token index
    ([1, head, pos] or [1, head, pos, pos]; a padded row counts only up to its length)."""
    batch = as_batch(lens, reference)
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


def checked_means(lens: Any, reference: Any, sites: list[Site], width: int) -> dict[int, torch.Tensor]:
    """:func:`reference_means` for inputs of ``width`` tokens; a shorter reference set is an InputError."""
    means = reference_means(lens, reference, sites)
    longest = next(iter(means.values())).shape[2]
    if width > longest:
        raise InputError(f"mean ablation of {width} tokens needs a reference set at least as long; its longest input "
                         f"has {longest} tokens")
    return means


def _edit_hook(site: Site, mode: Mode, heads: torch.Tensor, mean: torch.Tensor | None, orders: torch.Tensor | None,
               lengths: list[int], seed: int, tokens: torch.Tensor | None):
    def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
        edited = edit_values(value, mode, site.edit, mean=mean, orders=orders, lengths=lengths, seed=seed + site.layer)
        return keep_heads(keep_tokens(edited, value, tokens), value, heads)

    return hook


def edit_hooks(lens: Any, inputs_width: int, lengths: list[int], mode: Mode, sites: list[Site],
               heads: torch.Tensor, reference: Any, seed: int, tokens: torch.Tensor | None = None,
               means: dict[int, torch.Tensor] | None = None) -> list[tuple[str, Any]]:
    """The forward hooks that apply ``mode`` at ``sites`` in the ``heads`` mask (and the ``tokens``
    mask [batch, width], None: every token), for a batch of ``lengths`` padded to ``inputs_width`` tokens
    (``reference``: the inputs of "mean", or ``means``: their :func:`checked_means`, computed once)."""
    if mode.name == "mean" and means is None:
        means = checked_means(lens, reference, sites, inputs_width)
    means = means or {}
    orders = token_orders(mode, lengths, inputs_width, seed)
    return [(site.hook, _edit_hook(site, mode, heads, means.get(site.layer), orders, lengths, seed, tokens))
            for site in sites]


@overload
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: None = None, reference: Any = None,
           seed: int = 0, tokens: Any = None) -> torch.Tensor: ...
@overload
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: Metric, reference: Any = None,
           seed: int = 0, tokens: Any = None) -> np.ndarray: ...
@overload
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: Metric | None = None, reference: Any = None,
           seed: int = 0, tokens: Any = None) -> torch.Tensor | np.ndarray: ...
def ablate(lens: Any, inputs: Any, *, mode: str | tuple | Mode, layers: int | Iterable[int] | None = None,
           heads: int | Iterable[int] | None = None, metric: Metric | None = None, reference: Any = None,
           seed: int = 0, tokens: Any = None) -> torch.Tensor | np.ndarray:
    """Run ``inputs`` with the positions of ``layers`` × ``heads`` replaced, in one forward pass.

    ``mode``: "integer" (one unit per token, RoPE's positions), "constant" (no positional signal,
    NoPE-like), "mean" (each token index's mean over ``reference``, default the inputs themselves),
    "shuffle" (the tokens' values permuted; row b by ``torch.randperm(length, generator=
    torch.Generator().manual_seed(seed + b))``, the same in every layer and head), ("window", w) (the
    same within consecutive blocks of w tokens, default 8), or ("interpolate", p):
    z' = (1 − p)·z + p·t in every selected layer of the same pass, as the RePo authors' forward applies
    ``dynamic_pe_pdrop`` (("interpolate", p, "constant") moves toward the constant). On the positions'
    own scale: "affine" (each head's least-squares line a + b·t), "rank" (order kept, spacing even over
    the head's range), "scaled" (the integers rescaled to the head's range) and "random" (a random
    direction of the "affine" edit's size, seeded by ``seed``). What integer and constant mean per
    mechanism, and how its positions are summed, comes from the registry
    (``repo_lens.model.registry.position_edit``).
    ``layers=None``: every learned layer (every layer of a model without learned positions).
    ``tokens``: edit only these tokens' entries (a slice, indices, a span name of a Prompt such as
    "needle", "~needle" or "rest"; see ``repo_lens.interventions.tokens``); the edit is computed over
    the whole prompt first.
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
    parsed = parse_mode(mode)
    seed = check_int(seed, "seed", minimum=0)
    batch = as_batch(lens, inputs)
    sites = select_sites(lens.model, layers)
    selected = token_mask(tokens, batch.prompts, batch.lengths, batch.ids.shape[1])
    hooks = edit_hooks(lens, batch.ids.shape[1], batch.lengths, parsed, sites, head_mask(lens.model, heads),
                       inputs if reference is None else reference, seed, selected)
    with torch.no_grad():
        logits = lens.model.run_with_hooks(batch.ids, fwd_hooks=hooks)
        if metric is None:
            return logits
        return metric_values(metric, logits).double().cpu().numpy()
