"""Where an edit applies: the layers and heads (sites), the tokens, and the cells of a grid.

The second stage of the data path: ``select_sites`` and ``head_mask`` pick layers and heads,
``token_mask`` the tokens, ``grid_cells`` and ``cell_mask`` the cells a grid edits one at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from repo_lens.errors import InputError
from repo_lens.options import keyword_dataclass
from repo_lens.interventions.options import TokenSelection
from repo_lens.model.registry import PositionEdit, learned_layers, position_edit
from repo_lens.model.transformer import LensModel
from repo_lens.validation import check_indices

# layers or heads: an index, indices (negatives count from the end), or None (see each function)
Indices = int | Iterable[int] | None


@keyword_dataclass
@dataclass(frozen=True, kw_only=True)
class Site:
    """Layer ``layer``'s writable positions: the hook ``hook`` and its mechanism's ``edit``."""

    layer: int
    kind: str
    edit: PositionEdit

    @property
    def hook(self) -> str:
        """The full hook name, e.g. ``blocks.3.attn.hook_pos``."""
        return f"blocks.{self.layer}.{self.edit.hook}"


def _indices(value: Any, size: int, name: str) -> list[int]:
    return sorted(set(check_indices(value, size, name, owner="model")))


def select_sites(model: LensModel, layers: Indices) -> list[Site]:
    """The sites of ``layers`` (an index, indices, or None: every layer whose positions are learned, or
    every layer of a model without learned positions, e.g. a RoPE baseline).

    >>> from repo_lens.model.tiny import tiny_model
    >>> [site.hook for site in select_sites(tiny_model("repo"), None)]
    ['blocks.2.attn.hook_pos', 'blocks.3.attn.hook_pos']
    """
    kinds = list(model.cfg.layer_mechanisms)
    if layers is None:
        chosen = learned_layers(kinds) or list(range(len(kinds)))
    else:
        chosen = _indices(layers, len(kinds), "layer")
    sites = []
    for layer in chosen:
        try:
            sites.append(Site(layer=layer, kind=kinds[layer], edit=position_edit(kinds[layer])))
        except KeyError as error:
            raise InputError(f"layer {layer}: {error.args[0]}; pick other layers") from None
    return sites


def head_mask(model: LensModel, heads: Indices) -> torch.Tensor:
    """Boolean [n_heads], True for the selected heads (None: every head).

    >>> from repo_lens.model.tiny import tiny_model
    >>> head_mask(tiny_model("repo"), [0, -1]).tolist()
    [True, False, False, True]
    """
    n_heads = int(model.cfg.n_heads)
    mask = torch.zeros(n_heads, dtype=torch.bool)
    mask[[] if heads is None else _indices(heads, n_heads, "head")] = True
    return mask if heads is not None else ~mask


REST = "rest"
_REST_EXCLUDES = ("question", "query", "answer")
_HELP = ('tokens is None (every token), a slice, a token index or a list of them, a span name of a built prompt '
         '(e.g. "needle", "question"), a list of span names, "~name" (every token outside a span), or "rest" '
         '(every token outside the needles, the question and the answer)')


def _span_mask(prompt: Any, name: str, length: int) -> np.ndarray:
    mask = np.zeros(length, dtype=bool)
    if name == REST:
        names = [key for key in prompt.spans if key.startswith("needle") or key in _REST_EXCLUDES]
        if not names:
            raise InputError(f'tokens="rest" needs a prompt with a needle, question or answer span; this one has '
                             f"{sorted(prompt.spans)}")
        for key in names:
            start, end = prompt.spans[key]
            mask[start:end] = True
        return ~mask
    negate = name.startswith("~")
    key = name[1:] if negate else name
    if key not in prompt.spans:
        raise InputError(f"tokens={name!r}: the prompt has no span {key!r}; its spans are {sorted(prompt.spans)}")
    start, end = prompt.spans[key]
    mask[start:end] = True
    return ~mask if negate else mask


def _row_mask(tokens: Any, prompt: Any, length: int, width: int) -> np.ndarray:
    if isinstance(tokens, slice):
        mask = np.zeros(width, dtype=bool)
        mask[:length][tokens] = True
        return mask
    names = [tokens] if isinstance(tokens, str) else None
    if names is None and isinstance(tokens, Sequence) and tokens and all(isinstance(item, str) for item in tokens):
        names = list(tokens)
    mask = np.zeros(width, dtype=bool)
    if names is not None:
        if prompt is None:
            raise InputError(f"tokens={tokens!r} names a span of a built prompt, but this input is plain text or ids; "
                             "pass Prompts (e.g. from niah_prompt) or token indices")
        for name in names:
            mask[:length] |= _span_mask(prompt, name, length)
        return mask
    indices = token_indices(tokens)
    if not all(-length <= index < length for index in indices):
        raise InputError(f"tokens {indices!r:.60} are out of range for a prompt of {length} tokens; "
                         f"use indices in 0..{length - 1} (or -{length}..-1 to count from the end)")
    mask[[index % length for index in indices]] = True
    return mask


def token_indices(tokens: Any) -> list[int]:
    """``tokens`` as integer token indices (one int, or a 1-D sequence of them, checked by
    :func:`repo_lens.validation.check_indices`), each prompt checking the range against its own length.

    >>> token_indices(np.int64(2)), token_indices([0, -1])
    ([2], [0, -1])
    """
    try:
        return check_indices(tokens, None, "token")
    except InputError as error:
        raise InputError(f"tokens={tokens!r:.60}: {error}; {_HELP}") from None


def token_mask(tokens: TokenSelection, prompts: list, lengths: list[int], width: int) -> torch.Tensor | None:
    """Boolean [batch, width]: the selected tokens of each row (None when ``tokens`` is None: every token).

    >>> token_mask(slice(1, 3), [None], [4], 4).int().tolist()
    [[0, 1, 1, 0]]
    >>> from repo_lens.data.spans import PromptBuilder
    >>> from repo_lens.model.byte_tokenizer import ByteTokenizer
    >>> b = PromptBuilder(); b.add("ab", "needle"); b.add("cd"); b.add("e?", "question")
    >>> prompt = b.build(ByteTokenizer(), answer="f", answer_separator="", add_special_tokens=False)
    >>> token_mask("rest", [prompt], [len(prompt)], len(prompt)).int().tolist()
    [[0, 0, 1, 1, 0, 0, 0]]
    """
    if tokens is None:
        return None
    rows = [_row_mask(tokens, prompt, length, width) for prompt, length in zip(prompts, lengths)]
    mask = torch.as_tensor(np.stack(rows))
    if not mask.any():
        raise InputError(f"tokens={tokens!r:.60} selects no token; {_HELP}")
    return mask


@keyword_dataclass
@dataclass(frozen=True, kw_only=True)
class Cell:
    """One grid cell: a ``layer``, one ``head`` (None: every selected head) and one ``token`` (None:
    every token; for a pairwise quantity, the token's row: the positions it sees)."""

    layer: int
    head: int | None = None
    token: int | None = None

    @property
    def index(self) -> tuple[int, ...]:
        """Where the cell's value goes in the grid's array."""
        return tuple(part for part in (self.layer, self.head, self.token) if part is not None)


def grid_cells(grid: str, sites: Sequence[Site], heads: Sequence[int], tokens: Sequence[int]) -> list[Cell]:
    """The cells of ``grid``, ordered by layer.

    >>> from repo_lens.interventions.edit_targets import select_sites
    >>> from repo_lens.model.tiny import tiny_model
    >>> sites = select_sites(tiny_model("repo"), None)
    >>> [cell.index for cell in grid_cells("layer_head", sites, [0, 3], [])]
    [(2, 0), (2, 3), (3, 0), (3, 3)]
    """
    layers = [site.layer for site in sites]
    if grid == "layer":
        return [Cell(layer=layer) for layer in layers]
    if grid == "layer_head":
        return [Cell(layer=layer, head=head) for layer in layers for head in heads]
    return [Cell(layer=layer, head=head, token=token) for layer in layers for head in heads for token in tokens]


def cell_mask(cell: Cell, heads: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Boolean mask shaped like one row of the quantity ([head, pos] or [head, query, key]): the
    entries ``cell`` writes (``heads``: the selected heads, for cells of every head).

    >>> cell_mask(Cell(layer=0, head=1, token=2), torch.ones(2, dtype=torch.bool), torch.Size([2, 3])).int().tolist()
    [[0, 0, 0], [0, 0, 1]]
    """
    mask = torch.zeros(shape, dtype=torch.bool)
    rows = heads.clone() if cell.head is None else torch.arange(shape[0]) == cell.head
    if cell.token is None:
        mask[rows] = True
    else:
        mask[rows, cell.token] = True
    return mask
