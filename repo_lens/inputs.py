"""Checks shared by every entry point that takes text or token ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from repo_lens.errors import InputError


def check_text(text: Any, has_tokenizer: bool) -> None:
    """Reject non-str or empty text, and text for a model without a tokenizer."""
    if not isinstance(text, str):
        raise InputError(f"expected text as str, got {type(text).__name__}")
    if not text.strip():
        raise InputError("the text is empty; pass non-empty text (or a list of token ids)")
    if not has_tokenizer:
        raise InputError("this model has no tokenizer; pass token ids instead of text")


def token_ids(inputs: Any, encode: Callable[[str], list[int]], vocab_size: int) -> list[int]:
    """Token ids from text (through ``encode``) or from a 1-D / [1, T] sequence, array or tensor.

    >>> token_ids([3, 1, 2], encode=None, vocab_size=5)
    [3, 1, 2]
    """
    if isinstance(inputs, str):
        return encode(inputs)
    if hasattr(inputs, "detach"):  # a torch tensor
        inputs = inputs.detach().cpu().numpy()
    array = np.asarray(inputs)
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
