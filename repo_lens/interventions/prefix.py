"""The state two prompts share before their first differing token, and patched runs that continue it.

Position quantities of token t depend only on tokens 0..t (attention is causal; running sums add up
earlier tokens), so a clean and a corrupted prompt that agree on tokens 0..c−1 have the same
residual stream and positions there in every layer, and a patch that leaves those tokens' quantities
alone leaves them unchanged. Such tokens run once (:func:`run_prefix`, through the model's KV cache);
the clean run, the corrupted run and every patched copy run only the tokens from c on, against that
cache, the way decoding continues a prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from repo_lens.capture import forward_lock
from repo_lens.interventions.cells import Cell, cell_mask
from repo_lens.interventions.selection import Site
from repo_lens.model.cache import KVCache


@dataclass
class Prefix:
    """The first ``length`` tokens' KV ``cache``, each site layer's ``quantities`` [1, head, length
    (, length)] and the ``logits`` [1, length, vocab]."""

    length: int
    cache: KVCache
    quantities: dict[int, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None

    def fresh_cache(self) -> KVCache:
        """A copy of the cache that a run may extend (the tensors are shared, never written in place)."""
        copy = KVCache(len(self.cache.keys))
        copy.keys, copy.values = list(self.cache.keys), list(self.cache.values)
        copy.position_states = [dict(state) for state in self.cache.position_states]
        return copy

    def full(self, layer: int, suffix: torch.Tensor, pairwise: bool) -> torch.Tensor:
        """The quantity of every token: the prefix's, then ``suffix`` [rows, head, pos − length (, pos)]."""
        if self.length == 0:
            return suffix
        head = self.quantities[layer].to(suffix.dtype).expand(suffix.shape[0], *self.quantities[layer].shape[1:])
        if not pairwise:
            return torch.cat((head, suffix), dim=2)
        full = suffix.new_zeros(*suffix.shape[:2], suffix.shape[-1], suffix.shape[-1])
        full[:, :, :self.length, :self.length] = head
        full[:, :, self.length:] = suffix
        return full


def shared_prefix(clean_ids: torch.Tensor, corrupted_ids: torch.Tensor, mapping: np.ndarray) -> int:
    """How many leading tokens the pair shares: equal ids, and each either aligned to itself or to none
    (at most all but the corrupted prompt's last token, which always runs).

    >>> shared_prefix(torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 2, 5, 4]]), np.arange(4))
    2
    """
    n = min(clean_ids.shape[1], corrupted_ids.shape[1], corrupted_ids.shape[1] - 1)
    same = (clean_ids[0, :n] == corrupted_ids[0, :n]).cpu().numpy()
    same &= (mapping[:n] == np.arange(n)) | (mapping[:n] < 0)
    return int(n if same.all() else np.argmin(same))


def run_prefix(model: Any, ids: torch.Tensor, length: int, sites: Sequence[Site] = ()) -> Prefix:
    """Run the first ``length`` tokens of ``ids`` [1, pos] into a KV cache, keeping each site's quantity.

    >>> from repo_lens.model.tiny import tiny_model
    >>> prefix = run_prefix(tiny_model("fox"), torch.tensor([[1, 2, 3]]), 2)
    >>> prefix.cache.seq_len, tuple(prefix.logits.shape)
    (2, (1, 2, 257))
    """
    prefix = Prefix(length, model.new_cache())
    if length == 0:
        return prefix

    def keep(layer: int):
        def hook(value: torch.Tensor, hook: Any) -> None:
            prefix.quantities[layer] = value.detach()

        return hook

    with torch.no_grad(), forward_lock(model), model.hooks(fwd_hooks=[(s.hook, keep(s.layer)) for s in sites]):
        prefix.logits = model(ids[:, :length], cache=prefix.cache)
    return prefix


def first_changed(chunk: Sequence[Cell], heads: torch.Tensor, patched: dict[int, torch.Tensor],
                  corrupted: dict[int, torch.Tensor], floor: int = 0) -> int:
    """The first token from ``floor`` on whose quantity some cell of ``chunk`` changes (the token count
    when none does).

    >>> q = torch.zeros(1, 2, 4); p = q.clone(); p[0, 1, 2] = 1.0
    >>> first_changed([Cell(0, head=1)], torch.ones(2, dtype=torch.bool), {0: p}, {0: q})
    2
    """
    width = next(iter(patched.values())).shape[2]
    first = width
    for cell in chunk:
        differs = patched[cell.layer][0] != corrupted[cell.layer][0]  # [head, pos (, pos)]
        mask = cell_mask(cell, heads, differs.shape).to(differs.device) & differs
        rows = mask.flatten(2).any(-1) if mask.dim() == 3 else mask  # [head, pos]
        changed = torch.nonzero(rows.any(0)[floor:]).flatten()
        if changed.numel():
            first = min(first, floor + int(changed[0]))
    return first


def _expanded(value: Any, rows: int) -> Any:
    if isinstance(value, torch.Tensor) and value.shape[0] == 1:
        return value.expand(rows, *value.shape[1:])
    return value


def suffix_inputs(prefix: KVCache, shared: Any, length: int):
    """``rest`` for :func:`repo_lens.interventions.runs.run_from` on the tokens after the first
    ``length``: each block gets a KV cache holding the prefix's layer state for the rows it runs, the
    offset, and ``shared`` (the model's shared increments of those tokens; None for most models)."""
    cache = KVCache(len(prefix.keys))

    def rest(layer: int, rows: int) -> tuple[Any, ...]:
        cache.keys[layer] = _expanded(prefix.keys[layer], rows)
        cache.values[layer] = _expanded(prefix.values[layer], rows)
        cache.position_states[layer] = {key: _expanded(value, rows)
                                        for key, value in prefix.position_states[layer].items()}
        return cache, length, _expanded(shared, rows)

    return rest
