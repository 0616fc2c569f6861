"""Query-dependent additive biases written as path sums: logit_ij += Σ_{l=j+1}^{i} ψ(i, l).

GRAPE-AP (the GRAPE authors' ``llama-mha-grape-ap-v1.py``) computes its bias exactly so; any other
query-dependent bias b(i, j) with b(i, i) = 0 (their key-/query-gated GRAPE-A) is the path sum of
ψ(i, l) = b(i, l − 1) − b(i, l). A layer publishes ψ through ``hook_potential`` [batch, head, query,
key] (writing there changes the bias), −ψ through ``hook_query_delta`` and the last query's row through
``hook_delta``; positions = Σ_{s≤j} −ψ(T, s) are the keys as seen from the last query T, so that its bias
is position_j − position_T (as for ALiBi and FoX).
"""

from __future__ import annotations

import torch
from transformer_lens.hook_points import HookPoint

from repo_lens.model.additive import _QueryKeyPositions


def path_sums(psi: torch.Tensor) -> torch.Tensor:
    """[..., query, key] Σ_{l=j+1}^{K−1} ψ[..., l] for every key j (entries after the query are zero).

    >>> path_sums(torch.tensor([[0.0, -1.0, -2.0]])).tolist()
    [[-3.0, -2.0, 0.0]]
    """
    through = psi.flip(-1).cumsum(-1).flip(-1)  # Σ_{l≥j}
    return torch.cat((through[..., 1:], torch.zeros_like(through[..., :1])), dim=-1)


class EdgePotentials(_QueryKeyPositions):
    """Base of the authors' contextual mechanisms: subclasses compute ψ (:meth:`edge_potentials`)."""

    row_bias_hooks: tuple[str, ...] = ("mechanism.hook_potential",)

    def __init__(self) -> None:
        super().__init__()
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_potential = HookPoint()

    def edge_potentials(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: torch.Tensor,
                        n_past: int, state: dict | None) -> torch.Tensor:
        """ψ [batch, head, query, key] fp32 for the new queries over every key."""
        raise NotImplementedError

    def bias_and_positions(self, psi: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the logit bias, the last query's positions) of the potentials ψ, through the hooks."""
        psi = self.hook_potential(psi.masked_fill(~allowed, 0.0)).masked_fill(~allowed, 0.0)
        delta = self.hook_delta(self.hook_query_delta(-psi)[:, :, -1, :])
        return path_sums(psi), self.last_query_positions(delta, psi.shape[2])

    def query_rows_bias(self, hooked: dict[str, torch.Tensor], rows: torch.Tensor, scores: torch.Tensor,
                        row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        """The bias [head, rows, keys] of query rows ``row_index`` over keys ``key_index``, from the layer's
        potentials ``hooked["mechanism.hook_potential"]`` [head, query, key] of one sequence."""
        psi = hooked["mechanism.hook_potential"][:, row_index][:, :, key_index]
        return path_sums(psi.masked_fill(key_index[None, None, :] > row_index[None, :, None], 0.0))
