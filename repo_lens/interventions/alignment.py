"""Which clean token each corrupted token takes its positions from, when patching.

Prompts of equal length align token by token; prompts of different lengths align by named spans
(e.g. the needle, the query and the answer of a NIAH prompt): the i-th token of a span in the
corrupted prompt takes the i-th token of the same span in the clean prompt. Tokens in no named
span keep their corrupted values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from repo_lens.errors import InputError
from repo_lens.interventions.batch import Batch


def _by_spans(clean: Batch, corrupted: Batch, names: Sequence[str]) -> np.ndarray:
    clean_prompt, corrupted_prompt = clean.prompts[0], corrupted.prompts[0]
    if clean_prompt is None or corrupted_prompt is None:
        raise InputError("aligning by spans needs Prompt inputs (repo_lens.data builders, e.g. niah_prompt), "
                         "whose .spans name the tokens; plain text or ids align only token by token")
    mapping = np.full(corrupted.lengths[0], -1, dtype=np.int64)
    for name in names:
        missing = [which for which, prompt in (("clean", clean_prompt), ("corrupted", corrupted_prompt))
                   if name not in prompt.spans]
        if missing:
            raise InputError(f"span {name!r} is not in the {' and '.join(missing)} prompt; both have "
                             f"{sorted(set(clean_prompt.spans) & set(corrupted_prompt.spans))}")
        (a, b), (c, d) = clean_prompt.spans[name], corrupted_prompt.spans[name]
        if b - a != d - c:
            raise InputError(f"span {name!r} has {b - a} tokens in the clean prompt and {d - c} in the corrupted "
                             "one; spans that align must have the same number of tokens")
        taken, wanted = mapping[c:d], np.arange(a, b)
        if ((taken >= 0) & (taken != wanted)).any():
            raise InputError(f"span {name!r} overlaps another aligned span at different offsets in the two "
                             "prompts; pick disjoint spans (or nested ones that move together)")
        mapping[c:d] = wanted
    return mapping


def alignment(clean: Batch, corrupted: Batch, align: str | Sequence[str] | None = None) -> np.ndarray:
    """int64 [corrupted tokens]: the clean token index each corrupted token takes, −1 for none.
    ``align``: None or "index" (token by token: equal lengths), or span names.

    >>> from repo_lens.data.spans import Prompt
    >>> def prompt(n, start):
    ...     return Prompt("", np.zeros(n, np.int64), {"needle": (start, start + 2)}, {}, (n - 1, n), "")
    >>> alignment(Batch(None, [4], [prompt(4, 1)]), Batch(None, [5], [prompt(5, 3)]), ["needle"]).tolist()
    [-1, -1, -1, 1, 2]
    """
    n_clean, n_corrupted = clean.lengths[0], corrupted.lengths[0]
    if align is None or align == "index":
        if n_clean != n_corrupted:
            raise InputError(f"the clean prompt has {n_clean} tokens and the corrupted one {n_corrupted}: prompts of "
                             "different lengths align by named spans; pass align=[span names], e.g. "
                             "['needle', 'query', 'answer'] for NIAH prompts")
        return np.arange(n_corrupted, dtype=np.int64)
    names = [align] if isinstance(align, str) else list(align)
    if not names or not all(isinstance(name, str) for name in names):
        raise InputError(f"align must be None, 'index' or a list of span names, got {align!r:.60}")
    return _by_spans(clean, corrupted, names)


def transplant(clean: torch.Tensor, corrupted: torch.Tensor, mapping: np.ndarray, pairwise: bool) -> torch.Tensor:
    """``corrupted`` [1, head, pos (, pos)] with each aligned token's entries taken from ``clean`` (its
    ``mapping`` [pos] index there; −1 keeps the corrupted entry). Pairwise quantities take an entry
    when both its query and its key are aligned.

    >>> transplant(torch.tensor([[[1.0, 2.0]]]), torch.zeros(1, 1, 3), np.array([-1, 0, 1]), False).tolist()
    [[[0.0, 1.0, 2.0]]]
    """
    out = corrupted.clone()
    where = torch.as_tensor(np.flatnonzero(mapping >= 0), device=corrupted.device)
    source = torch.as_tensor(mapping[mapping >= 0], device=corrupted.device)
    if not pairwise:
        out[..., where] = clean[..., source].to(out.dtype)
    else:
        out[:, :, where[:, None], where[None, :]] = clean[:, :, source[:, None], source[None, :]].to(out.dtype)
    return out
