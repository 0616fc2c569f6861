"""What any lens offers: the protocol :class:`repo_lens.Lens` and the nnsight-backed
:class:`repo_lens.hf.HFLens` both satisfy, and the input path they share.

Code that only traces and reads the tokenizer (the app, studies, analyses) should ask for a
:class:`LensProtocol`, so it works with either lens. Both lenses turn their input into token ids
and fit them to the context through :func:`prepare_ids`, and expand a list of texts through
:func:`trace_each`, so truncation, its error and its ``meta`` record are the same for both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, overload, runtime_checkable

from tqdm.auto import tqdm

from repo_lens.errors import InputError
from repo_lens.inputs import fit_to_context, is_text_batch, token_ids

if TYPE_CHECKING:
    import numpy as np
    import torch

    from repo_lens.trace import Trace


@runtime_checkable
class LensProtocol(Protocol):
    """A model with its tokenizer that traces positions.

    Example:
        >>> from repo_lens.model import ModelConfig, LensModel
        >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
        >>> from repo_lens.lens import Lens
        >>> cfg = ModelConfig(family="olmo2", vocab_size=257, d_model=16, n_layers=2, n_heads=2, d_mlp=32,
        ...                   layer_mechanisms=["rope", "repo"])
        >>> lens = Lens(LensModel(cfg), ByteTokenizer())
        >>> isinstance(lens, LensProtocol), lens.n_layers, lens.n_heads
        (True, 2, 2)
    """

    tokenizer: Any  # None for a model without one (then only token ids can be traced)
    meta: dict[str, Any]  # what was loaded: name, source, dtype, device, …; copied into every trace

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def context_length(self) -> int | None:
        """Tokens the model was trained on (None: unknown, nothing is truncated)."""

    @property
    def device(self) -> torch.device: ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens as the model expects them)."""

    def display_tokens(self, ids: Sequence[int]) -> list[str]:
        """Display form of each token id."""

    @overload
    def trace(self, inputs: str | Sequence[int] | np.ndarray | torch.Tensor, *, truncate: bool = False,
              allow_beyond_context: bool = False, progress: bool = True) -> Trace: ...
    @overload
    def trace(self, inputs: list[str] | tuple[str, ...], *, truncate: bool = False,
              allow_beyond_context: bool = False, progress: bool = True) -> list[Trace]: ...
    @overload
    def trace(self, inputs: Any, *, truncate: bool = False, allow_beyond_context: bool = False,
              progress: bool = True) -> Trace | list[Trace]: ...
    def trace(self, inputs: Any, *, truncate: bool = False, allow_beyond_context: bool = False,
              progress: bool = True) -> Trace | list[Trace]:
        """A Trace of a text or of token ids; a list of Traces for a list of texts."""


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


def check_batch_size(batch_size: Any) -> int:
    """``batch_size`` as a positive int, or an InputError that says what would do.

    >>> check_batch_size(8)
    8
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer (1 = one text at a time); got {batch_size!r}")
    return batch_size


def length_batches(lengths: Sequence[int], batch_size: int, context_length: int | None = None) -> list[list[int]]:
    """Indices of the inputs grouped into batches of at most ``batch_size``, sorted by length (longest
    first) so little padding is needed. An input longer than ``context_length`` goes alone: dynamic
    NTK rope scaling sets its frequencies from the padded length, which must then be its own.

    Example:
        >>> length_batches([3, 9, 5, 7, 1], 2)
        [[1, 3], [2, 0], [4]]
        >>> length_batches([3, 9, 5, 7, 1], 2, context_length=8)
        [[1], [3, 2], [0, 4]]
    """
    batch_size = check_batch_size(batch_size)
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    alone = [[index] for index in order if context_length and lengths[index] > context_length]
    rest = [index for index in order if not (context_length and lengths[index] > context_length)]
    return alone + [rest[start:start + batch_size] for start in range(0, len(rest), batch_size)]


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
    if batch_size > 1 and hasattr(lens, "trace_batch"):
        return lens.trace_batch(list(inputs), batch_size=batch_size, progress=progress, **options)
    # one text or one id sequence at a time: trace gives a single Trace for each
    return [cast("Trace", lens.trace(one, progress=progress, **options)) for one in inputs]


def trace_each(trace_one: Callable[[Any], Trace], inputs: Any, *, progress: bool = True) -> Trace | list[Trace]:
    """``trace_one(inputs)``, or ``[trace_one(text) for text in inputs]`` (with a progress bar)
    when ``inputs`` is a list of texts.

    Example:
        >>> trace_each(len, ["ab", "cde"], progress=False), trace_each(len, "ab")
        ([2, 3], 2)
    """
    if is_text_batch(inputs):
        return [trace_one(text) for text in tqdm(inputs, desc="tracing", unit="text", disable=not progress)]
    return trace_one(inputs)
