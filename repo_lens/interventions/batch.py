"""The inputs of an intervention as one right-padded batch of token ids.

An input is a text, a 1-D sequence of token ids, or a :class:`repo_lens.data.spans.Prompt` (whose
spans metrics and alignment can use); a list or tuple of them is a batch. Pads (token 0) come after
each sequence's tokens, which causal attention never lets a real token see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from repo_lens.data.spans import Prompt
from repo_lens.errors import InputError
from repo_lens.inputs import fit_to_context, token_ids


@dataclass
class Batch:
    """``ids`` [batch, width] (right-padded with 0), each row's ``lengths``, and its ``prompts`` (None for plain ids or text)."""

    ids: torch.Tensor
    lengths: list[int]
    prompts: list[Prompt | None]

    def __len__(self) -> int:
        return len(self.lengths)


def _is_batch(inputs: Any) -> bool:
    if isinstance(inputs, (list, tuple)):
        return bool(inputs) and not isinstance(inputs[0], (int, np.integer))
    return hasattr(inputs, "ndim") and inputs.ndim == 2 and inputs.shape[0] > 1


def _ids_of(lens: Any, item: Any) -> tuple[list[int], Prompt | None]:
    if isinstance(item, Prompt):
        return token_ids(np.asarray(item.ids), None, lens.vocab_size), item
    return token_ids(item, lens.encode, lens.vocab_size), None


def as_batch(lens: Any, inputs: Any) -> Batch:
    """``inputs`` (one input or a list of them) as a :class:`Batch` on ``lens``' device; input longer
    than the model's context is an error.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> batch = as_batch(Lens(tiny_model("repo"), ByteTokenizer()), ["abc", [5, 6]])
    >>> batch.ids.tolist(), batch.lengths
    ([[97, 98, 99], [5, 6, 0]], [3, 2])
    """
    items = list(inputs) if _is_batch(inputs) else [inputs]
    if isinstance(inputs, (list, tuple)) and not inputs:
        raise InputError("no inputs: pass a text, token ids, a Prompt, or a non-empty list of them")
    rows, prompts = [], []
    for item in items:
        ids, prompt = _ids_of(lens, item)
        fit_to_context(ids, lens.context_length, offer_truncation=False)
        rows.append(ids)
        prompts.append(prompt)
    width = max(len(ids) for ids in rows)
    padded = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        padded[row, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return Batch(padded.to(lens.device), [len(ids) for ids in rows], prompts)


def as_single(lens: Any, inputs: Any, name: str) -> Batch:
    """One input (``name`` says which, for the error) as a batch of one.

    >>> from repo_lens.lens import Lens
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> from repo_lens.model.tiny import tiny_model
    >>> as_single(Lens(tiny_model("repo"), ByteTokenizer()), "hi", "clean").lengths
    [2]
    """
    if _is_batch(inputs):
        raise InputError(f"{name} must be one prompt (a text, token ids or a Prompt), not a batch of "
                         f"{len(inputs)}; patch one clean / corrupted pair at a time")
    return as_batch(lens, inputs)
