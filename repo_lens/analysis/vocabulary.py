"""The delta-graft vocabulary table of "Learned position increments" (Brendan Long): δ of every vocabulary id,
by the script's token category (``experiments/delta_graft/analyze_deltas.py``).

:func:`vocabulary_table` is the script's analysis on an array of δ, one per id, and the token strings: the
ids whose δ exceeds 2 are set aside as unused (tokens never seen in fine-tuning, whose unregularised δ can
blow up), the rest grouped by :func:`repo_lens.analysis.vocabulary_categories`, each group's median (the
lower middle value for an even count, as ``torch.median`` gives it) sorted from highest, with the 20
highest- and lowest-δ ids and the δ of the end-of-text token. :func:`vocabulary_increments` computes the
δ of every id from a loaded model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_lens.analysis._checks import as_float_array, as_list, check_same_length
from repo_lens.analysis.categories import vocabulary_categories
from repo_lens.analysis.increments import trace_increments
from repo_lens.errors import InputError
from repo_lens.lens_inputs import trace_many

if TYPE_CHECKING:
    from repo_lens.protocol import LensProtocol

UNUSED_ABOVE = 2.0  # the script's artifact threshold: δ > 2 marks an unused token
TOP_K = 20


def lower_median(values: np.ndarray) -> float:
    """The median as ``torch.median`` computes it: the lower of the two middle values for an even count.

    >>> lower_median(np.array([4.0, 1.0, 3.0, 2.0])), lower_median(np.array([3.0, 1.0, 2.0]))
    (2.0, 2.0)
    """
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return float(ordered[(ordered.size - 1) // 2])


@dataclass(frozen=True)
class VocabularyTable:
    """The script's table. ``categories`` are ordered by descending ``median`` (ties: the category met first
    in id order); ``labels`` (V,) is every id's category; ``unused`` the ids set aside; ``summary`` the
    median (lower), mean, std (ddof 1, as ``torch.std``), min and max of the kept δ; ``top`` / ``bottom``
    the ``top_k`` kept ids of highest δ (highest first) and lowest δ (lowest first)."""

    categories: tuple[str, ...]
    median: np.ndarray
    count: np.ndarray
    labels: np.ndarray
    unused: np.ndarray
    summary: dict[str, float]
    eos_id: int | None
    eos_delta: float | None
    top: np.ndarray
    bottom: np.ndarray
    deltas: np.ndarray

    def as_dict(self, tokens: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON-ready: medians and counts by category, the summary, EOS, and the top / bottom ids (with
        their token strings when ``tokens`` is given) and δ."""

        def listed(ids: np.ndarray) -> list[dict[str, Any]]:
            return [{"id": int(i), "delta": float(self.deltas[i]), **({"token": tokens[i]} if tokens else {})}
                    for i in ids]

        return {"categories": {name: {"median": float(self.median[k]), "count": int(self.count[k])}
                               for k, name in enumerate(self.categories)},
                "summary": self.summary, "eos": {"id": self.eos_id, "delta": self.eos_delta},
                "unused": {"count": int(self.unused.size), "ids": self.unused[:5].tolist()},
                "top": listed(self.top), "bottom": listed(self.bottom)}


def _kept_summary(kept: np.ndarray) -> dict[str, float]:
    return {"median": lower_median(kept), "mean": float(kept.mean()),
            "std": float(kept.std(ddof=1)) if kept.size > 1 else float("nan"),
            "min": float(kept.min()), "max": float(kept.max())}


def _check_table_options(eos_id: object, n_ids: int, unused_above: object, top_k: object) -> None:
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, (int, np.integer))
                               or not 0 <= eos_id < n_ids):
        raise InputError(f"eos_id must be a vocabulary id in 0..{n_ids - 1}, or None; got {eos_id!r}")
    if unused_above is not None and (isinstance(unused_above, bool) or not isinstance(unused_above, (int, float))
                                     or not np.isfinite(unused_above)):
        raise InputError(f"unused_above must be a finite number (the script's 2.0) or None; got {unused_above!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise InputError(f"top_k must be an int >= 0; got {top_k!r}")


def vocabulary_table(deltas: np.ndarray, tokens: Sequence[str], eos_id: int | None = None,
                     unused_above: float | None = UNUSED_ABOVE, top_k: int = TOP_K) -> VocabularyTable:
    """δ of every vocabulary id by the delta-graft script's category, as ``analyze_deltas.py`` reports it
    ("Learned position increments", Brendan Long).

    ``deltas``: (V,) δ of every id (e.g. a row of :func:`vocabulary_increments`); ``tokens``: the V token
    strings (``tokenizer.convert_ids_to_tokens(range(V))``); ``eos_id``: the end-of-text id, whose δ is
    reported apart (it stays in its category, as in the script). Ids with δ > ``unused_above`` are set aside
    (``None``: keep all) and left out of every statistic.

    Example:
        >>> import numpy as np
        >>> tokens = ["<|endoftext|>", "Ġthe", "ing", "Ġcat", ".", "Ġand", "s"]
        >>> t = vocabulary_table(np.array([1.05, 1.02, 0.97, 1.00, 1.04, 1.03, 9.0]), tokens, eos_id=0, top_k=2)
        >>> list(zip(t.categories, t.median.tolist()))
        [('other', 1.05), ('sentence_punct', 1.04), ('function_word', 1.02), ('word_start', 1.0), ('subword_continuation', 0.97)]
        >>> t.unused.tolist(), t.top.tolist(), t.bottom.tolist(), t.eos_delta
        ([6], [0, 4], [2, 3], 1.05)
    """
    delta = as_float_array(deltas, "deltas", ndim=1, shape_hint="pass one δ per vocabulary id, shape (V,)")
    tokens = as_list(tokens, "tokens", "tokenizer.convert_ids_to_tokens(range(V))")
    check_same_length("deltas", delta.size, "tokens", len(tokens))
    _check_table_options(eos_id, delta.size, unused_above, top_k)
    labels = vocabulary_categories(tokens)
    unused = delta > unused_above if unused_above is not None else np.zeros(delta.size, dtype=bool)
    kept_ids = np.nonzero(~unused)[0]
    if kept_ids.size == 0:
        raise InputError(f"every δ exceeds unused_above={unused_above}; pass a higher threshold or None")
    seen = list(dict.fromkeys(labels[kept_ids].tolist()))  # the script's dict: categories in id order
    medians = {name: lower_median(delta[kept_ids][labels[kept_ids] == name]) for name in seen}
    ordered = sorted(seen, key=lambda name: -medians[name])
    descending = kept_ids[np.argsort(-delta[kept_ids], kind="stable")]
    k = min(int(top_k), descending.size)
    return VocabularyTable(
        categories=tuple(ordered), median=np.asarray([medians[name] for name in ordered]),
        count=np.asarray([int(np.sum(labels[kept_ids] == name)) for name in ordered], dtype=np.int64),
        labels=labels, unused=np.nonzero(unused)[0], summary=_kept_summary(delta[kept_ids]),
        eos_id=None if eos_id is None else int(eos_id),
        eos_delta=None if eos_id is None else float(delta[eos_id]),
        top=descending[:k], bottom=descending[descending.size - k:][::-1], deltas=delta)


def document_separator(tokenizer: Any) -> int:
    """The id a model's documents start after: repo_lens' byte separator (256), else the tokenizer's
    end-of-text id (what the zoo's conversions join documents with).

    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> document_separator(ByteTokenizer())
    256
    """
    separator = getattr(tokenizer, "separator_id", None)
    if isinstance(separator, int):
        return separator
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        return eos
    raise InputError("the tokenizer has no end-of-text token to start a document with; pass prefix= "
                     "(e.g. [] for none, or [bos_id])")


def vocabulary_increments(lens: LensProtocol, ids: Sequence[int] | np.ndarray | None = None,
                          prefix: Sequence[int] | None = None, batch_size: int = 256,
                          progress: bool = False) -> np.ndarray:
    """δ of every vocabulary id (or of ``ids``), per layer: (L, n_ids), the mean over heads of each layer's
    increment (:func:`repo_lens.analysis.trace_increments`) at the id when it follows ``prefix``.

    ``prefix`` defaults to the document separator (:func:`document_separator`), as the post's scripts
    prepend EOS. For increments read from the token embeddings (a shared DeltaMLP, the delta graft) the
    prefix changes nothing: this is δ = DeltaMLP(embedding) of every id, what the graft's script tabulates.
    For a per-layer DeltaMLP it is the id's δ as the first token of a document, the nearest context-free
    equivalent. Layers that sum no increments give their position steps (1.0 for RoPE; NaN with an empty
    prefix, where the id is the first token and has no step). One forward pass
    per ``batch_size`` ids; the whole vocabulary of a 135M-parameter model takes minutes on a CPU.

    Example:
        >>> from repo_lens.lens import Lens
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.model.tiny import tiny_model
        >>> vocabulary_increments(Lens(tiny_model("rope"), ByteTokenizer()), ids=[97, 98]).shape
        (4, 2)
    """
    chosen = np.arange(lens.vocab_size) if ids is None else np.asarray(ids)
    if chosen.ndim != 1 or chosen.size == 0 or chosen.dtype.kind not in "iu":
        raise InputError(f"ids must be a non-empty 1-D list of token ids; got {chosen.dtype} of shape {chosen.shape}")
    if chosen.min() < 0 or chosen.max() >= lens.vocab_size:
        raise InputError(f"ids must lie in 0..{lens.vocab_size - 1} (the vocabulary); got {int(chosen.min())}.."
                         f"{int(chosen.max())}")
    lead = [document_separator(lens.tokenizer)] if prefix is None else [int(i) for i in prefix]
    columns = []
    step = max(1, int(batch_size)) * 16  # traces held at once
    for start in range(0, chosen.size, step):
        sequences = [[*lead, int(i)] for i in chosen[start:start + step]]
        traces = trace_many(lens, sequences, batch_size=batch_size, progress=progress)
        columns += [trace_increments(trace)[:, :, -1].mean(axis=1) for trace in traces]
    return np.stack(columns, axis=1)
