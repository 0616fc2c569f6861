"""What patching and attribution share: a clean / corrupted pair, aligned, and the clean run's positions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from repo_lens.interventions.alignment import alignment
from repo_lens.interventions.batch import Batch, as_single
from repo_lens.interventions.metrics import Metric, first_logit_row, metric_values
from repo_lens.interventions.prefix import Prefix, run_prefix, shared_prefix
from repo_lens.interventions.runs import capture
from repo_lens.interventions.selection import Site, head_mask, select_sites
from repo_lens.interventions.tokens import token_mask


@dataclass
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


def prepare_pair(lens: Any, clean: Any, corrupted: Any, metric: Metric, layers: int | Iterable[int] | None,
                 heads: int | Iterable[int] | None, align: str | Sequence[str] | None, tokens: Any = None) -> Pair:
    """Check and align the pair, pick the sites, and run the clean prompt once (no gradient).
    ``tokens``: only these corrupted tokens take clean positions (see ``repo_lens.interventions.tokens``).

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> from repo_lens.interventions.metrics import logit_difference
    >>> pair = prepare_pair(Lens(tiny_model("repo"), ByteTokenizer()), "abc", "abd", logit_difference(1, 2), None, None, None)
    >>> pair.first_layer, pair.aligned_tokens, tuple(pair.clean_quantities[2].shape), pair.prefix.length
    (2, [0, 1, 2], (1, 4, 3), 2)
    """
    clean_batch, corrupted_batch = as_single(lens, clean, "clean"), as_single(lens, corrupted, "corrupted")
    mapping = alignment(clean_batch, corrupted_batch, align)
    selected = token_mask(tokens, corrupted_batch.prompts, corrupted_batch.lengths, corrupted_batch.lengths[0])
    if selected is not None:
        mapping = np.where(selected[0].numpy(), mapping, -1)
    sites = select_sites(lens.model, layers)
    heads_on = head_mask(lens.model, heads)
    shared = shared_prefix(clean_batch.ids, corrupted_batch.ids, mapping)
    prefix = run_prefix(lens.model, corrupted_batch.ids, shared, sites)
    with torch.no_grad():
        same_length = clean_batch.lengths == corrupted_batch.lengths
        # prompts of other lengths: the metric reads other tokens, so only the positions are kept (and one row)
        rows_from = first_logit_row([metric], clean_batch.lengths[0]) if same_length else clean_batch.lengths[0] - 1
        run = capture(lens.model, clean_batch.ids, sites, prefix=prefix, rows_from=rows_from)
        clean_metric = float(metric_values(metric, run.logits)[0]) if same_length else float("nan")
    return Pair(clean_batch, corrupted_batch, mapping, sites, heads_on, run.quantities, clean_metric, prefix)
