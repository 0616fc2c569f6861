"""CoPE as its authors' code runs it (``projects/cope/src/cope/context_position.py``), on the zoo's
``cope`` module: gates g_ij = sigmoid(q_i·x_j/√d) with x the keys, a separate key projection
(``--cope-sep-key``) or the values (``--cope-val-gates``); p_ij = min(Σ_{t=j}^{i} g_it, npos − 1);
the bias interpolates q_i·e[⌊p⌋] and q_i·e[⌈p⌉]. Their attention divides this bias by √d with the
logits unless ``--cope-nodiv``; the loader folds that division into e."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from repo_lens.model.additive import ContextualPositions

if TYPE_CHECKING:
    from repo_lens.model.authors.cope_relative import RelativePositions


def interpolated_bias(q: torch.Tensor, gates: torch.Tensor, embeddings: torch.Tensor, max_position: int) -> torch.Tensor:
    """[..., query, key] CoPE bias from masked gates [..., query, key], queries [..., query, d] and e [d, npos].

    >>> q = torch.ones(1, 1); e = torch.tensor([[0.0, 1.0, 2.0]])
    >>> interpolated_bias(q, torch.tensor([[0.5, 1.0]]), e, 2).tolist()
    [[1.5, 1.0]]
    """
    positions = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=float(max_position))
    floor = positions.floor()
    weight = positions - floor
    floor = floor.long()
    ceil = torch.clamp(floor + 1, max=max_position)
    logits_at = q.float() @ embeddings.float()
    return logits_at.gather(-1, ceil) * weight + logits_at.gather(-1, floor) * (1.0 - weight)


class GatedCope(ContextualPositions):
    """The zoo's CoPE fed the gate scores the authors' options pick; the query-row bias comes from the
    hooked gates (``mechanism.hook_gates``), so it holds whatever tensor the gates were computed from.
    With ``--pos-emb cope+rel`` the layer's relative embeddings are its submodule ``relative``."""

    row_bias_hooks: tuple[str, ...] = ("mechanism.hook_gates",)
    relative: RelativePositions  # set only with --pos-emb cope+rel

    def query_rows_bias(self, hooked: dict[str, torch.Tensor], rows: torch.Tensor, scores: torch.Tensor,
                        row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        gates = hooked["mechanism.hook_gates"][:, row_index][:, :, key_index]
        gates = gates.masked_fill(key_index[None, None, :] > row_index[None, :, None], 0.0)
        bias = interpolated_bias(rows, gates, self.position_embeddings, self.max_position)
        if hasattr(self, "relative"):
            bias = bias + self.relative.rows_bias(rows, row_index, key_index)
        return bias
