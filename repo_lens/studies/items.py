"""The analyses ``repo-lens analyze`` runs over a model and a prompt set, item by item.

Each study turns (lens, settings) into resumable items (see :mod:`repo_lens.studies.runs`) and,
where a result needs every item (pooled AUC), a summary. ``analyses/smollm2_niah.py`` runs the
same NIAH items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from repo_lens.analysis import (
    attention_mass,
    attention_mass_batch,
    boundary_auc,
    chunk_patterns,
    cjk_boundary_labels,
    jieba_words,
    pattern_fractions,
    range_stats,
    trace_increments,
)
from repo_lens.data import Prompt, encode_with_offsets, niah_single
from repo_lens.model.registry import learned_layers
from repo_lens.protocol import check_batch_size, trace_many
from repo_lens.studies.runs import Item


def niah_record(lens, length: int, depth: float, seed: int, beyond_context: bool = False,
                accuracy: bool = False) -> dict[str, Any]:
    """Attention mass per token on needle / query / rest (RePo Table 4) for one RULER niah_single prompt.

    The query rows are the appended answer tokens; ``needle`` is the needle's value (the tokens
    of the golden answer), ``query`` the question plus the answer prefix, ``rest`` every other key
    before the answer. ``beyond_context`` measures prompts longer than the model's training
    context (length extrapolation); ``accuracy`` adds :func:`answer_accuracy` (one more forward).
    """
    return niah_records(lens, [(length, depth, seed)], beyond_context, accuracy)[0]


def niah_records(lens, cells: list[tuple[int, float, int]], beyond_context: bool = False, accuracy: bool = False,
                 batch_size: int = 1) -> list[dict[str, Any]]:
    """:func:`niah_record` of each (length, depth, seed) cell, the attention mass of ``batch_size``
    prompts per forward pass (:func:`repo_lens.analysis.attention_mass_batch`; the same numbers)."""
    prompts = [niah_single(lens.tokenizer, length, depth, seed=seed) for length, depth, seed in cells]
    measured = [(prompt.ids, {"needle": prompt.spans[prompt.meta["targets"][0]], "query": prompt.spans["query"]},
                 prompt.query) for prompt in prompts]
    if batch_size > 1:
        masses = attention_mass_batch(lens, measured, batch_size=batch_size, allow_beyond_context=beyond_context)
    else:
        masses = [attention_mass(lens, *one, allow_beyond_context=beyond_context) for one in measured]
    records = []
    for (length, depth, seed), prompt, mass in zip(cells, prompts, masses):
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
        records.append(record)
    return records


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
               beyond_context: bool = False, accuracy: bool = False, batch_size: int = 1) -> list[Item]:
    """:func:`niah_record` over lengths × depths × seeds, one resumable item each; ``batch_size``
    prompts share a forward pass (the first item of each batch computes the batch)."""
    cells = [(length, depth, seed) for length in lengths for depth in depths for seed in seeds]
    computes = batched_computes(cells, batch_size,
                                lambda group: niah_records(lens, group, beyond_context, accuracy, batch_size))
    return [(f"niah_len={length}_depth={depth}_seed={seed}", compute)
            for (length, depth, seed), compute in zip(cells, computes)]


def batched_computes(inputs: list, batch_size: int, compute_batch: Callable[[list], list]) -> list[Callable[[], Any]]:
    """One ``compute()`` per input for resumable items: consecutive inputs form batches of
    ``batch_size``; the first compute of a batch runs ``compute_batch`` on the whole batch, and each
    input's compute hands back its own result (an item resumed alone recomputes its batch).

    >>> calls = []
    >>> computes = batched_computes([1, 2, 3], 2, lambda group: calls.append(group) or [x * 10 for x in group])
    >>> [compute() for compute in computes], calls
    ([10, 20, 30], [[1, 2], [3]])
    """
    batch_size = check_batch_size(batch_size)
    ready: dict[int, Any] = {}

    def compute_of(index: int) -> Callable[[], Any]:
        def compute() -> Any:
            if index not in ready:
                group = range(index - index % batch_size, min(index - index % batch_size + batch_size, len(inputs)))
                ready.update(zip(group, compute_batch([inputs[member] for member in group])))
            return ready.pop(index)

        return compute

    return [compute_of(index) for index in range(len(inputs))]


def position_items(lens, texts: list[str], chunk: int = 16, eps: float = 0.2, batch_size: int = 1) -> list[Item]:
    """Range statistics (RePo Fig. 2) and chunk-pattern shares (Fig. 3) per text, by layer; ``batch_size``
    texts share a forward pass (the same records)."""

    def record_of(trace) -> dict[str, Any]:
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

    computes = batched_computes(texts, batch_size, lambda group: [
        record_of(trace) for trace in trace_many(lens, group, batch_size=batch_size, truncate=True)])
    return [(f"text_{index:05d}", compute) for index, compute in enumerate(computes)]


def boundary_items(lens, sentences, batch_size: int = 1) -> list[Item]:
    """Position increments at scored CJK gaps, with gold and jieba labels (seeds/002), per sentence;
    ``batch_size`` sentences share a forward pass (the same records).

    ``sentences``: objects with ``text`` and gold ``words`` (e.g. :func:`repo_lens.data.peoples_daily`).
    """

    def record_of(sentence, ids: list[int], offsets, trace) -> dict[str, Any]:
        text = sentence.text[: max(end for _, end in offsets)]
        increments = trace_increments(trace)
        record: dict[str, Any] = {"n_tokens": len(ids), "layer_kinds": trace.layer_kinds}
        for name, words in (("gold", sentence.words), ("jieba", jieba_words(sentence.text))):
            words = clip_words(words, len(text))
            labels = cjk_boundary_labels(text, offsets, words)
            record[f"{name}_labels"] = labels.labels[labels.scored].astype(int)
            record[f"{name}_increments"] = increments[:, :, labels.scored]
        return record

    def compute_batch(group) -> list[dict[str, Any]]:
        encoded = [encode_with_offsets(lens.tokenizer, sentence.text) for sentence in group]
        limit = lens.context_length
        encoded = [(ids[:limit], offsets[:limit]) for ids, offsets in encoded]
        traces = trace_many(lens, [ids for ids, _ in encoded], batch_size=batch_size)
        return [record_of(sentence, ids, offsets, trace)
                for sentence, (ids, offsets), trace in zip(group, encoded, traces)]

    computes = batched_computes(list(sentences), batch_size, compute_batch)
    return [(f"sentence_{index:05d}", compute) for index, compute in enumerate(computes)]


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
