"""What every lens does with its inputs: token ids fitted to the model's context (:func:`prepare_ids`) and
many inputs traced in batches (:func:`trace_many`).

:class:`repo_lens.Lens` and :class:`repo_lens.hf.HFLens` turn each input into token ids through
:func:`prepare_ids`, so truncation, its error and its ``meta`` record are the same for both. The checks
that need no lens (batch sizes, batches grouped by length) are in :mod:`repo_lens.inputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from repo_lens.inputs import check_batch_size, fit_to_context, token_ids

if TYPE_CHECKING:
    from repo_lens.protocol import LensProtocol
    from repo_lens.trace import Trace


def prepare_ids(lens: LensProtocol, inputs: Any, *, truncate: bool = False,
                allow_beyond_context: bool = False) -> tuple[list[int], dict[str, Any]]:
    """Token ids of one text or id sequence, fitted to ``lens``' context, and the trace's first
    ``meta``: the lens' meta, an empty ``warnings`` list and the context record of
    :func:`repo_lens.inputs.fit_to_context` (``truncation``, ``beyond_context``).

    Example:
        >>> from types import SimpleNamespace
        >>> toy = SimpleNamespace(meta={"name": "toy"}, vocab_size=10, context_length=3, encode=None)
        >>> prepare_ids(toy, [1, 2, 3, 4], truncate=True)
        ([1, 2, 3], {'name': 'toy', 'warnings': [], 'truncation': {'original_tokens': 4, 'kept_tokens': 3}})
    """
    ids = token_ids(inputs, lens.encode, lens.vocab_size)
    ids, record = fit_to_context(ids, lens.context_length, truncate=truncate,
                                 allow_beyond_context=allow_beyond_context)
    return ids, {**lens.meta, "warnings": [], **record}


def trace_many(lens: LensProtocol, inputs: Sequence[Any], *, batch_size: int = 1, progress: bool = False,
               **options: Any) -> list[Trace]:
    """One Trace per input (a text or a sequence of token ids), in input order: ``batch_size`` inputs
    per forward pass where the lens batches (``trace_batch``), else one at a time. ``options`` go to
    the lens' trace (``truncate``, ``allow_beyond_context``).

    Example:
        >>> from repo_lens.model.tiny import tiny_model
        >>> from repo_lens.lens import Lens
        >>> traces = trace_many(Lens(tiny_model("rope"), None), [[5, 6, 7], [8, 9]], batch_size=2)
        >>> [len(trace) for trace in traces]
        [3, 2]
    """
    check_batch_size(batch_size)
    if batch_size > 1:
        return lens.trace_batch(list(inputs), batch_size=batch_size, progress=progress, **options)
    # one text or one id sequence at a time: trace gives a single Trace for each
    return [lens.trace_batch([one], batch_size=1, progress=False, **options)[0] for one in inputs]
