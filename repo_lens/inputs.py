"""Checks shared by every entry point that takes text or token ids, and the batching of many inputs
(batch sizes, batches grouped by length)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from repo_lens.errors import ContextLengthError, InputError
from repo_lens.validation import utf8_bytes


def check_text(text: Any, has_tokenizer: bool) -> None:
    """Reject non-str or empty text, text that is not valid UTF-8 (a lone surrogate, e.g. from
    undecodable command-line bytes), and text for a model without a tokenizer."""
    if not isinstance(text, str):
        raise InputError(f"expected text as str, got {type(text).__name__}")
    utf8_bytes(text)
    if not text.strip():
        raise InputError("the text is empty; pass non-empty text (or a list of token ids)")
    if not has_tokenizer:
        raise InputError("this model has no tokenizer; pass token ids instead of text")


def is_text_batch(inputs: Any) -> bool:
    """Whether ``inputs`` is a non-empty list or tuple of texts (traced one by one into a list).

    >>> is_text_batch(["a", "b"]), is_text_batch("a"), is_text_batch([1, 2])
    (True, False, False)
    """
    return isinstance(inputs, (list, tuple)) and bool(inputs) and all(isinstance(item, str) for item in inputs)


def token_ids(inputs: Any, encode: Callable[[str], list[int]] | None, vocab_size: int) -> list[int]:
    """Token ids from text (through ``encode``) or from a 1-D / [1, T] sequence, array or tensor.
    With ``encode=None`` only token ids are accepted.

    >>> token_ids([3, 1, 2], encode=None, vocab_size=5)
    [3, 1, 2]
    """
    if isinstance(inputs, str):
        if encode is None:
            raise InputError("expected token ids, not text; encode the text first (e.g. lens.encode(text))")
        encoded = encode(inputs)
        if encoded and (min(encoded) < 0 or max(encoded) >= vocab_size):
            raise InputError(f"the tokenizer gave token ids {min(encoded)}..{max(encoded)}, outside the model's "
                             f"vocabulary 0..{vocab_size - 1}; the checkpoint's tokenizer does not match its model")
        return encoded
    if hasattr(inputs, "detach"):  # a torch tensor
        inputs = inputs.detach().cpu().numpy()
    try:
        array = np.asarray(inputs)
    except (ValueError, TypeError):  # ragged nesting such as [[1, 2], [3]]
        raise InputError("expected text, a non-empty 1-D sequence of token ids or a list of texts; got a ragged "
                         f"nested sequence {inputs!r:.80}") from None
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1 or array.size == 0:
        raise InputError(
            f"expected text, a non-empty 1-D sequence of token ids or a list of texts; got shape {array.shape}"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"token ids must be integers, got dtype {array.dtype}")
    if array.min() < 0 or array.max() >= vocab_size:
        raise InputError(
            f"token ids must lie in 0..{vocab_size - 1} (the model's vocabulary); got {array.min()}..{array.max()}"
        )
    return array.astype(np.int64).tolist()


def fit_to_context(
    ids: list[int], context_length: int | None, *, truncate: bool = False, allow_beyond_context: bool = False,
    offer_truncation: bool = True,
) -> tuple[list[int], dict[str, Any]]:
    """The ids to run and what a trace's ``meta`` records about the model's context.

    Input longer than ``context_length`` raises InputError unless ``truncate=True`` (keep the
    first ``context_length`` ids; ``meta["truncation"]``) or ``allow_beyond_context=True`` (keep
    all, extrapolating; ``meta["beyond_context"]``). ``offer_truncation=False`` leaves truncation
    out of the error's remedies, for callers whose spans would not survive it.
    ``context_length=None`` (unknown) accepts any length.

    >>> fit_to_context([5, 6, 7], 2, truncate=True)
    ([5, 6], {'truncation': {'original_tokens': 3, 'kept_tokens': 2}})
    >>> fit_to_context([5, 6, 7], 2, allow_beyond_context=True)
    ([5, 6, 7], {'truncation': None, 'beyond_context': {'tokens': 3, 'context': 2}})
    """
    for name, flag in (("truncate", truncate), ("allow_beyond_context", allow_beyond_context)):
        if not isinstance(flag, (bool, np.bool_)):
            raise InputError(f"{name} must be True or False, not {flag!r:.40}")
    record: dict[str, Any] = {"truncation": None}
    if not context_length or len(ids) <= context_length:
        return ids, record
    if allow_beyond_context:
        record["beyond_context"] = {"tokens": len(ids), "context": context_length}
        return ids, record
    if not truncate:
        remedies = ("truncate", "allow_beyond_context") if offer_truncation else ("allow_beyond_context",)
        raise ContextLengthError(len(ids), context_length, remedies)
    record["truncation"] = {"original_tokens": len(ids), "kept_tokens": context_length}
    return ids[:context_length], record


def check_batch_size(batch_size: Any) -> int:
    """``batch_size`` as a positive int, or an InputError that says what would do.

    >>> check_batch_size(8)
    8
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer (1 = one text at a time); got {batch_size!r}")
    return batch_size


def check_input_list(inputs: Any) -> Sequence[Any]:
    """What ``trace_batch`` takes: a list (or other sequence) of texts or token-id sequences; one text, or
    what is no sequence, is an InputError that points to ``trace``.

    >>> check_input_list(["a text", [5, 6, 7]])
    ['a text', [5, 6, 7]]
    """
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        raise InputError(f"trace_batch takes a list of texts or token-id sequences, not {type(inputs).__name__}; "
                         "for one text use trace(text)")
    return inputs


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
