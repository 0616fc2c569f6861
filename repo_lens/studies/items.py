"""The analyses ``repo-lens analyze`` runs over a model and a prompt set, item by item.

Each study turns (lens, settings) into resumable items (see :mod:`repo_lens.studies.runs`) and,
where a result needs every item (pooled AUC), a summary. ``analyses/smollm2_niah.py`` runs the
same NIAH items.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from repo_lens.analysis import (
    attention_mass,
    boundary_auc,
    chunk_patterns,
    cjk_boundary_labels,
    jieba_words,
    pattern_fractions,
    position_increments,
    range_stats,
)
from repo_lens.data import Prompt, encode_with_offsets, niah_single
from repo_lens.model.registry import learned_layers
from repo_lens.studies.runs import Item


def niah_record(lens, length: int, depth: float, seed: int, beyond_context: bool = False,
                accuracy: bool = False) -> dict[str, Any]:
    """Attention mass per token on needle / query / rest (RePo Table 4) for one RULER niah_single prompt.

    The query rows are the appended answer tokens; ``needle`` is the needle's value (the tokens
    of the golden answer), ``query`` the question plus the answer prefix, ``rest`` every other key
    before the answer. ``beyond_context`` measures prompts longer than the model's training
    context (length extrapolation); ``accuracy`` adds :func:`answer_accuracy` (one more forward).
    """
    prompt = niah_single(lens.tokenizer, length, depth, seed=seed)
    spans = {"needle": prompt.spans[prompt.meta["targets"][0]], "query": prompt.spans["query"]}
    mass = attention_mass(lens, prompt.ids, spans, prompt.query, allow_beyond_context=beyond_context)
    record: dict[str, Any] = {
        "length": length, "depth": depth, "seed": seed, "n_tokens": len(prompt),
        "needle_token_depth": prompt.meta.get("needle_token_depth", [None])[0],
        "answer": prompt.answer, "query_rows": list(prompt.query),
        "per_token": {name: float(value) for name, value in mass.per_token.items()},
        "total": {name: mass.total(name) for name in mass.per_token},
        "span_lengths": {name: int(mass.span_lengths[name]) for name in mass.per_token},
        "self_mass": float(mass.self_mass.mean()),
        "per_token_by_layer": {name: mass.by_layer_head[name].mean(axis=1) for name in mass.per_token},
    }
    if accuracy:
        record.update(answer_accuracy(lens, prompt))
    return record


def answer_accuracy(lens, prompt: Prompt) -> dict[str, float]:
    """Teacher-forced: the share of answer tokens the model's argmax predicts, and whether it gets all.

    >>> import numpy as np, torch
    >>> from types import SimpleNamespace
    >>> class Echo(torch.nn.Module):  # predicts token t + 1 as the token at t (a copy of the input)
    ...     def forward(self, ids):
    ...         return torch.nn.functional.one_hot(ids, 10).float()
    >>> lens = SimpleNamespace(model=Echo(), device=torch.device("cpu"))
    >>> answer_accuracy(lens, SimpleNamespace(ids=np.array([1, 2, 2, 3]), query=(2, 4)))
    {'token_accuracy': 0.5, 'exact': 0.0}
    """
    ids = torch.as_tensor(np.asarray(prompt.ids), device=lens.device).unsqueeze(0)
    start, end = prompt.query
    with torch.inference_mode():
        logits = lens.model(ids)[0, start - 1:end - 1]
    hits = (logits.argmax(-1).cpu() == torch.as_tensor(np.asarray(prompt.ids[start:end]))).numpy()
    return {"token_accuracy": float(hits.mean()), "exact": float(hits.all())}


def niah_items(lens, lengths: list[int], depths: list[float], seeds: list[int],
               beyond_context: bool = False, accuracy: bool = False) -> list[Item]:
    """:func:`niah_record` over lengths × depths × seeds, one resumable item each."""
    return [(f"niah_len={length}_depth={depth}_seed={seed}",
             (lambda l=length, d=depth, s=seed: niah_record(lens, l, d, s, beyond_context, accuracy)))
            for length in lengths for depth in depths for seed in seeds]


def position_items(lens, texts: list[str], chunk: int = 16, eps: float = 0.2) -> list[Item]:
    """Range statistics (RePo Fig. 2) and chunk-pattern shares (Fig. 3) per text, by layer."""

    def compute(text: str) -> dict[str, Any]:
        trace = lens.trace(text, truncate=True)
        ranges = range_stats(trace.positions)
        record: dict[str, Any] = {
            "n_tokens": len(trace), "layer_kinds": trace.layer_kinds,
            "range_mean_by_layer": ranges.mean(axis=1), "range_max_by_layer": ranges.max(axis=1),
            "range_by_layer_head": ranges, "truncated": trace.meta["truncation"] is not None,
        }
        if len(trace) >= chunk:
            fractions = pattern_fractions(chunk_patterns(trace.positions, chunk, eps))
            record["pattern_labels"] = list(fractions.labels)
            record["pattern_by_layer"] = fractions.per_layer
            learned = learned_layers(trace.layer_kinds)
            if learned:
                shares = fractions.per_layer[learned].mean(axis=0)
                record["learned_layers"] = dict(zip(fractions.labels, map(float, shares)))
        return record

    return [(f"text_{index:05d}", (lambda t=text: compute(t))) for index, text in enumerate(texts)]


def trace_increments(trace) -> np.ndarray:
    """(L, H, T) increments of a trace: the learned ones when stored, else position differences
    (the first token's increment is NaN there: it has no predecessor)."""
    if "increments" in trace.extras:
        return np.asarray(trace.extras["increments"], dtype=np.float64)
    return position_increments(trace.positions, origin=np.nan)


def boundary_items(lens, sentences) -> list[Item]:
    """Position increments at scored CJK gaps, with gold and jieba labels (seeds/002), per sentence.

    ``sentences``: objects with ``text`` and gold ``words`` (e.g. :func:`repo_lens.data.peoples_daily`).
    """

    def compute(sentence) -> dict[str, Any]:
        ids, offsets = encode_with_offsets(lens.tokenizer, sentence.text)
        limit = lens.context_length
        ids, offsets = ids[:limit], offsets[:limit]
        text = sentence.text[: max(end for _, end in offsets)]
        trace = lens.trace(ids)
        increments = trace_increments(trace)
        record: dict[str, Any] = {"n_tokens": len(ids), "layer_kinds": trace.layer_kinds}
        for name, words in (("gold", sentence.words), ("jieba", jieba_words(sentence.text))):
            words = clip_words(words, len(text))
            labels = cjk_boundary_labels(text, offsets, words)
            record[f"{name}_labels"] = labels.labels[labels.scored].astype(int)
            record[f"{name}_increments"] = increments[:, :, labels.scored]
        return record

    return [(f"sentence_{index:05d}", (lambda s=sentence: compute(s))) for index, sentence in enumerate(sentences)]


def clip_words(words, n_chars: int) -> list[str]:
    """The segmentation of the first ``n_chars`` characters (the last word cut where the text is cut).

    >>> clip_words(["人工智能", "是", "分支"], 6)
    ['人工智能', '是', '分']
    """
    clipped, total = [], 0
    for word in words:
        if total >= n_chars:
            break
        clipped.append(word[: n_chars - total])
        total += len(clipped[-1])
    return clipped


def summarize_boundaries(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled ROC-AUC per layer and head of increments against word boundaries (gold and jieba)."""
    summary: dict[str, Any] = {"layer_kinds": records[0]["layer_kinds"] if records else []}
    for name in ("gold", "jieba"):
        scores = [np.asarray(r[f"{name}_increments"], dtype=np.float64) for r in records if r[f"{name}_labels"]]
        labels = [np.asarray(r[f"{name}_labels"], dtype=bool) for r in records if r[f"{name}_labels"]]
        if not scores:
            continue
        pooled_scores, pooled_labels = np.concatenate(scores, axis=-1), np.concatenate(labels)
        auc = boundary_auc(pooled_scores, pooled_labels)
        summary[f"auc_{name}_by_layer_head"] = auc.tolist()
        summary[f"auc_{name}_by_layer"] = auc.mean(axis=1).tolist()
        summary[f"n_gaps_{name}"] = int(pooled_labels.size)
        summary[f"boundary_share_{name}"] = float(pooled_labels.mean())
    return summary


def summarize_niah(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean per-token mass on needle / query / rest over all items, and by length."""
    names = sorted({name for r in records for name in r["per_token"]})
    by_length: dict[int, list] = {}
    for record in records:
        by_length.setdefault(record["length"], []).append(record)
    return {
        "per_token": {name: float(np.mean([r["per_token"][name] for r in records])) for name in names},
        "per_token_by_length": {
            str(length): {name: float(np.mean([r["per_token"][name] for r in group])) for name in names}
            for length, group in sorted(by_length.items())
        },
    }


def summarize_positions(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean range per layer and pattern shares per layer, over texts (weighted equally)."""
    summary: dict[str, Any] = {"layer_kinds": records[0]["layer_kinds"] if records else []}
    summary["range_mean_by_layer"] = np.mean([r["range_mean_by_layer"] for r in records], axis=0).tolist()
    patterned = [r for r in records if "pattern_by_layer" in r]
    if patterned:
        summary["pattern_labels"] = patterned[0]["pattern_labels"]
        summary["pattern_by_layer"] = np.mean([r["pattern_by_layer"] for r in patterned], axis=0).tolist()
    return summary
