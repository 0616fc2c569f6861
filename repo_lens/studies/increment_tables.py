"""The learned-increments post's three analyses of learned position increments, on any byte-level lens.

- :func:`category_table`: mean increment per byte category and layer over held-out text.
- :func:`boundary_table`: Chinese word-boundary ROC-AUC per layer (gold and jieba segmentation).
- :func:`entity_table`: increment at the space inside real vs reversed two-word entities, per
  layer, with the two-sided Wilcoxon signed-rank p.

Increments are :func:`repo_lens.analysis.trace_increments`: the ones the mechanism sums (e.g. δ of
an LPI layer) and, for other mechanisms, differences of consecutive positions — so RoPE, NoPE and
RePo models go through the same tables. Values are averaged over heads (LPI layers have one δ per token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from repo_lens.analysis import (
    boundary_auc,
    byte_categories,
    entity_grouping_test,
    entity_prompts,
    increments_by_category,
    trace_increments,
)
from repo_lens.analysis.entities import ENTITY_PAIRS, token_at_char
from repo_lens.data import encode_with_offsets
from repo_lens.studies.items import boundary_items

if TYPE_CHECKING:
    from repo_lens.protocol import LensProtocol


def category_table(lens: LensProtocol, texts: Sequence[str], progress: bool = True) -> dict[str, Any]:
    """{"layers": [{category: mean}], "counts": {category: n}} pooled over ``texts`` (each cut to the
    model's context), head-averaged. The first byte of every text is left out (it has no gap)."""
    pooled_increments, pooled_categories = [], []
    for text in tqdm(texts, desc="increments by category", disable=not progress):
        ids = lens.encode(text)[: lens.context_length]
        trace = lens.trace(ids)
        pooled_increments.append(trace_increments(trace).mean(axis=1)[:, 1:])
        pooled_categories.append(byte_categories(ids)[1:])
    table = increments_by_category(np.concatenate(pooled_increments, axis=-1), np.concatenate(pooled_categories))
    return {
        "layers": [{label: float(table.mean[layer, i]) for i, label in enumerate(table.labels)}
                   for layer in range(table.mean.shape[0])],
        "counts": {label: int(table.count[0, i]) for i, label in enumerate(table.labels)},
    }


def boundary_table(lens: LensProtocol, sentences: Sequence[Any], progress: bool = True) -> dict[str, Any]:
    """Pooled ROC-AUC per layer of head-averaged increments at scored CJK gaps (the learned-increments post's protocol),
    against the sentences' gold words and against jieba (the records of :func:`boundary_items`)."""
    records = [compute() for _, compute in tqdm(boundary_items(lens, sentences), desc="word boundaries",
                                                 disable=not progress)]
    out: dict[str, Any] = {}
    for name in ("gold", "jieba"):
        pooled_labels = np.concatenate([record[f"{name}_labels"] for record in records]).astype(bool)
        scores = np.concatenate([record[f"{name}_increments"].mean(axis=1) for record in records], axis=-1)
        out[f"auc_{name}"] = boundary_auc(scores, pooled_labels).tolist()
        out[f"n_gaps_{name}"] = int(pooled_labels.size)
        out[f"boundary_share_{name}"] = float(pooled_labels.mean())
    return out


def entity_table(lens: LensProtocol, pairs: Sequence[tuple[str, str]] = ENTITY_PAIRS,
                 progress: bool = True) -> dict[str, Any]:
    """Increment at the space between the two words, real vs reversed order, per layer."""
    real, reversed_ = entity_prompts(pairs)
    values = []
    for prompts in (real, reversed_):
        rows = []
        for prompt in tqdm(prompts, desc="entities", disable=not progress):
            ids, offsets = encode_with_offsets(lens.tokenizer, prompt.text)
            increments = trace_increments(lens.trace(ids)).mean(axis=1)
            rows.append(increments[:, token_at_char(offsets, prompt.boundary)])
        values.append(np.stack(rows))
    test = entity_grouping_test(values[0], values[1])
    return {"mean_real": test.mean_real.tolist(), "mean_reversed": test.mean_reversed.tolist(),
            "share_smaller": test.share_smaller.tolist(), "p_value": test.p_value.tolist(), "n": test.n}

