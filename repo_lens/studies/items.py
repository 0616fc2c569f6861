"""The records and summaries of the studies ``repo-lens analyze`` runs (registered in
:mod:`repo_lens.studies.builtin`): NIAH attention mass, position ranges and patterns, Chinese word
boundaries.

``*_window_records`` make a corpus study's records from a batch of windows; ``summarize_*`` stream
over the records once. ``niah_items``, ``position_items`` and ``boundary_items`` are the same
records as resumable items of :func:`repo_lens.studies.resumable.run_items` for small lists (texts
truncated to the context); ``analyses/smollm2_niah.py`` runs the same NIAH items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from repo_lens.analysis import (
    PATTERN_LABELS,
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
from repo_lens.data.windows import Window
from repo_lens.model.registry import learned_layers
from repo_lens.inputs import check_batch_size
from repo_lens.lens_inputs import trace_many
from repo_lens.protocol import HookedLensProtocol, LensProtocol, require_hooked_lens
from repo_lens.studies.resumable import Item
from repo_lens.trace import Trace


def niah_record(lens: LensProtocol, length: int, depth: float, seed: int, beyond_context: bool = False,
                accuracy: bool = False) -> dict[str, Any]:
    """Attention mass per token on needle / query / rest (RePo Table 4) for one RULER niah_single prompt.

    The query rows are the appended answer tokens; ``needle`` is the needle's value (the tokens
    of the golden answer), ``query`` the question plus the answer prefix, ``rest`` every other key
    before the answer. ``beyond_context`` measures prompts longer than the model's training
    context (length extrapolation); ``accuracy`` adds :func:`answer_accuracy` (one more forward).
    """
    return niah_records(lens, [(length, depth, seed)], beyond_context, accuracy)[0]


def niah_records(lens: LensProtocol, cells: list[tuple[int, float, int]], beyond_context: bool = False,
                 accuracy: bool = False, batch_size: int = 1) -> list[dict[str, Any]]:
    """:func:`niah_record` of each (length, depth, seed) cell, the attention mass of ``batch_size``
    prompts per forward pass (:func:`repo_lens.analysis.attention_mass_batch`; the same numbers). Attention
    mass reads the model's hooks: a lens without them (an HFLens) is an InputError naming the study."""
    hooked = require_hooked_lens(lens, "the niah study")  # attention mass reads the model's hooks
    prompts = [niah_single(lens.tokenizer, length, depth, seed=seed) for length, depth, seed in cells]
    measured = [(prompt.ids, {"needle": prompt.spans[prompt.meta["targets"][0]], "query": prompt.spans["query"]},
                 prompt.query) for prompt in prompts]
    if batch_size > 1:
        masses = attention_mass_batch(hooked, measured, batch_size=batch_size, allow_beyond_context=beyond_context)
    else:
        masses = [attention_mass(hooked, *one, allow_beyond_context=beyond_context) for one in measured]
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
            record.update(answer_accuracy(hooked, prompt))
        records.append(record)
    return records


def answer_accuracy(lens: HookedLensProtocol, prompt: Prompt) -> dict[str, float]:
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


def niah_items(lens: LensProtocol, lengths: list[int], depths: list[float], seeds: list[int],
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


def position_record(trace: Trace, chunk: int = 16, eps: float = 0.2) -> dict[str, Any]:
    """Range statistics (RePo Fig. 2) and chunk-pattern shares (Fig. 3) of one trace, by layer (and the ranges
    by layer and head); ``n_chunks`` whole chunks of ``chunk`` tokens (no patterns below one chunk)."""
    ranges = range_stats(trace.positions)
    record: dict[str, Any] = {"n_tokens": len(trace), "range_mean_by_layer": ranges.mean(axis=1),
                              "range_max_by_layer": ranges.max(axis=1), "range_by_layer_head": ranges}
    if len(trace) >= chunk:
        fractions = pattern_fractions(chunk_patterns(trace.positions, chunk, eps))
        record["n_chunks"] = len(trace) // chunk
        record["pattern_by_layer"] = fractions.per_layer
        learned = learned_layers(trace.layer_kinds)
        if learned:
            shares = fractions.per_layer[learned].mean(axis=0)
            record["learned_layers"] = dict(zip(fractions.labels, map(float, shares)))
    return record


def position_items(lens: LensProtocol, texts: list[str], chunk: int = 16, eps: float = 0.2,
                   batch_size: int = 1) -> list[Item]:
    """:func:`position_record` per text (truncated to the context), with its layer kinds and pattern labels;
    ``batch_size`` texts share a forward pass (the same records). ``repo-lens analyze --study positions``
    cuts long texts into windows instead (:func:`position_window_records`)."""

    def record_of(trace) -> dict[str, Any]:
        record = {**position_record(trace, chunk, eps), "layer_kinds": trace.layer_kinds,
                  "truncated": trace.meta["truncation"] is not None}
        return {**record, "pattern_labels": list(PATTERN_LABELS)} if "pattern_by_layer" in record else record

    computes = batched_computes(texts, batch_size, lambda group: [
        record_of(trace) for trace in trace_many(lens, group, batch_size=batch_size, truncate=True)])
    return [(f"text_{index:05d}", compute) for index, compute in enumerate(computes)]


def trace_windows(lens: LensProtocol, windows: list[Window], options: dict[str, Any]) -> list[Trace]:
    """The traces of a batch of windows in one forward pass (longer than the context only with
    ``options["beyond_context"]``)."""
    return trace_many(lens, [window.ids for window in windows], batch_size=len(windows),
                      allow_beyond_context=bool(options.get("beyond_context", False)))


def position_window_records(lens: LensProtocol, windows: list[Window], options: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`position_record` of each window (``options``: ``chunk``, ``eps``): the ``positions`` study's record."""
    return [position_record(trace, options.get("chunk", 16), options.get("eps", 0.2))
            for trace in trace_windows(lens, windows, options)]


def boundary_record(text: str, spans: Sequence[tuple[int, int]] | np.ndarray, segmentations: dict[str, list[str]],
                    trace: Trace) -> dict[str, Any]:
    """Position increments at the scored CJK gaps of ``text`` (its tokens' character ``spans``) with each
    segmentation's labels (the learned-increments post): ``NAME_labels`` (n,) and ``NAME_increments`` (L, H, n) per name."""
    increments = trace_increments(trace)
    record: dict[str, Any] = {"n_tokens": len(trace)}
    for name, words in segmentations.items():
        labels = cjk_boundary_labels(text, spans, words)
        record[f"{name}_labels"] = labels.labels[labels.scored].astype(int)
        record[f"{name}_increments"] = increments[:, :, labels.scored]
    return record


def boundary_items(lens: LensProtocol, sentences, batch_size: int = 1) -> list[Item]:
    """Position increments at scored CJK gaps, with gold and jieba labels (the learned-increments post), per sentence
    (truncated to the context); ``batch_size`` sentences share a forward pass (the same records).

    ``sentences``: objects with ``text`` and gold ``words`` (e.g. :func:`repo_lens.data.peoples_daily`).
    """

    def record_of(sentence, ids: list[int], offsets, trace) -> dict[str, Any]:
        text = sentence.text[: max(end for _, end in offsets)]
        segmentations = {name: clip_words(words, len(text))
                         for name, words in (("gold", sentence.words), ("jieba", jieba_words(sentence.text)))}
        return {**boundary_record(text, offsets, segmentations, trace), "n_tokens": len(ids),
                "layer_kinds": trace.layer_kinds}

    def compute_batch(group) -> list[dict[str, Any]]:
        encoded = [encode_with_offsets(lens.tokenizer, sentence.text) for sentence in group]
        limit = lens.context_length
        encoded = [(ids[:limit], offsets[:limit]) for ids, offsets in encoded]
        traces = trace_many(lens, [ids for ids, _ in encoded], batch_size=batch_size)
        return [record_of(sentence, ids, offsets, trace)
                for sentence, (ids, offsets), trace in zip(group, encoded, traces)]

    computes = batched_computes(list(sentences), batch_size, compute_batch)
    return [(f"sentence_{index:05d}", compute) for index, compute in enumerate(computes)]


def boundary_window_records(lens: LensProtocol, windows: list[Window], options: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`boundary_record` of each window, against jieba's segmentation of the window's text and, where
    the document has one (People's Daily), the gold words cut to the window: the ``boundaries`` study's record."""
    records = []
    for window, trace in zip(windows, trace_windows(lens, windows, options)):
        spans = np.concatenate([np.zeros((window.prefix, 2), dtype=np.int64), window.offsets - window.char_start])
        segmentations = {}
        if window.document.words is not None:
            segmentations["gold"] = slice_words(window.document.words, window.char_start, window.char_end)
        segmentations["jieba"] = jieba_words(window.text)
        records.append(boundary_record(window.text, spans, segmentations, trace))
    return records


def clip_words(words: Sequence[str], n_chars: int) -> list[str]:
    """The segmentation of the first ``n_chars`` characters (the last word cut where the text is cut).

    >>> clip_words(["人工智能", "是", "分支"], 6)
    ['人工智能', '是', '分']
    """
    return slice_words(words, 0, n_chars)


def slice_words(words: Sequence[str], start: int, end: int) -> list[str]:
    """The segmentation of characters ``start:end`` of the text ``words`` make (the words at either edge cut).

    >>> slice_words(["人工智能", "是", "分支"], 2, 6)
    ['智能', '是', '分']
    """
    pieces, position = [], 0
    for word in words:
        word_end = position + len(word)
        if word and word_end > start and position < end:
            pieces.append(word[max(start - position, 0): min(end, word_end) - position])
        if word_end >= end:
            break
        position = word_end
    return pieces


def summarize_boundaries(records: Iterable[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pooled ROC-AUC per layer and head of increments against word boundaries (gold and jieba), over the
    records streamed once (the scored gaps' increments are held in memory: L × H × gaps floats)."""
    pooled: dict[str, tuple[list, list]] = {"gold": ([], []), "jieba": ([], [])}
    kinds = None
    for record in records:
        kinds = record.get("layer_kinds") if kinds is None else kinds
        for name, (scores, labels) in pooled.items():
            if record.get(f"{name}_labels") is not None and len(record[f"{name}_labels"]):
                scores.append(np.asarray(record[f"{name}_increments"], dtype=np.float64))
                labels.append(np.asarray(record[f"{name}_labels"], dtype=bool))
    summary: dict[str, Any] = {"layer_kinds": kinds} if kinds is not None else {}
    for name, (scores, labels) in pooled.items():
        if not scores:
            continue
        pooled_scores, pooled_labels = np.concatenate(scores, axis=-1), np.concatenate(labels)
        auc = boundary_auc(pooled_scores, pooled_labels)
        summary[f"auc_{name}_by_layer_head"] = auc.tolist()
        summary[f"auc_{name}_by_layer"] = auc.mean(axis=1).tolist()
        summary[f"n_gaps_{name}"] = int(pooled_labels.size)
        summary[f"boundary_share_{name}"] = float(pooled_labels.mean())
    return summary


def summarize_niah(records: Iterable[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Mean per-token mass on needle / query / rest over all items, and by length (running sums over the records)."""
    totals: dict[Any, dict[str, float]] = {}
    counts: dict[Any, int] = {}
    for record in records:
        for key in ("all", record["length"]):
            counts[key] = counts.get(key, 0) + 1
            sums = totals.setdefault(key, {})
            for name, value in record["per_token"].items():
                sums[name] = sums.get(name, 0.0) + float(value)

    def means(key: Any) -> dict[str, float]:
        return {name: totals[key][name] / counts[key] for name in sorted(totals[key])}

    lengths = sorted(key for key in totals if key != "all")
    return {"per_token": means("all") if counts else {},
            "per_token_by_length": {str(length): means(length) for length in lengths}}


def summarize_positions(records: Iterable[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Mean range per layer over windows (each weighted equally) and chunk-pattern shares per layer over
    chunks (each window weighted by its ``n_chunks``), from running sums over the records."""
    kinds, windows, chunks = None, 0, 0
    range_sum: np.ndarray | None = None
    pattern_sum: np.ndarray | None = None
    for record in records:
        kinds = record.get("layer_kinds") if kinds is None else kinds
        ranges = np.asarray(record["range_mean_by_layer"], dtype=np.float64)
        range_sum, windows = (ranges if range_sum is None else range_sum + ranges), windows + 1
        if record.get("pattern_by_layer") is not None:
            weight = record.get("n_chunks") or 1
            shares = np.asarray(record["pattern_by_layer"], dtype=np.float64) * weight
            pattern_sum, chunks = (shares if pattern_sum is None else pattern_sum + shares), chunks + weight
    summary: dict[str, Any] = {"layer_kinds": kinds} if kinds is not None else {}
    summary["range_mean_by_layer"] = (range_sum / windows).tolist() if range_sum is not None and windows else []
    if pattern_sum is not None:
        summary["pattern_labels"] = list(PATTERN_LABELS)
        summary["pattern_by_layer"] = (pattern_sum / chunks).tolist()
    summary.update(windows=windows, chunks=chunks)
    return summary
