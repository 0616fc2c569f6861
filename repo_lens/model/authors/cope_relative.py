"""Learned relative position logits as the CoPE authors' code runs them (github ``facebookresearch/RAM``,
``projects/cope/src/models/relative_position.py``, ``RelPosEmb`` with ``rel2abs``): query i adds
q_i·R[:, M − 1 − (i − j)] for key j (M = npos, the last column is distance 0). Beyond M − 1 tokens the
logit is 0, or R[:, 0]'s with ``--rel-pos-extend`` (their code asserts instead unless the input is
exactly block_size tokens long; we give the formula's value at every length).

The CoPE loader stores R already divided by √d_head (their attention divides the summed logits by it),
so the bias is q·R. Positions are the token index t (the bias depends only on the distance i − j).
"""

from __future__ import annotations

import torch
from torch import nn

from repo_lens.model.config import ModelConfig


class RelativePositions(nn.Module):
    """Kind ``rel``: ``emb`` [d_head, npos] (npos: ``extra["authors"]["rel_npos"]``, else cope_max_position + 1).

    Example:
        >>> cfg = ModelConfig(family="olmo2", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
        ...                   layer_mechanisms=["rel"], cope_max_position=3)
        >>> module = RelativePositions(cfg)
        >>> bias, positions = module(torch.ones(1, 2, 3, 8), None, torch.ones(3, 3, dtype=torch.bool).tril())
        >>> tuple(bias.shape), positions[0, 0].tolist()
        ((1, 2, 3, 3), [0.0, 1.0, 2.0])
    """

    kind = "rel"
    role = "contextual"
    row_bias_hooks: tuple[str, ...] = ()

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        options = cfg.extra.get("authors", {})
        self.npos = int(options.get("rel_npos") or cfg.cope_max_position + 1)
        self.extend = bool(options.get("rel_pos_extend", False))
        self.emb = nn.Parameter(torch.zeros(cfg.d_head, self.npos))

    def rows_bias(self, q: torch.Tensor, row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        """[..., rows, keys] logits q_i·R[:, M − 1 − (i − j)] for queries q [..., rows, d_head]."""
        logits = q.float() @ self.emb.float()  # [..., rows, npos]
        index = self.npos - 1 - (row_index[:, None] - key_index[None, :])
        outside = index < 0
        index = index.clamp(0, self.npos - 1).expand(*logits.shape[:-1], -1)
        bias = logits.gather(-1, index)
        return bias if self.extend else bias.masked_fill(outside, 0.0)

    def forward(self, q: torch.Tensor, scores: torch.Tensor | None, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The contextual call: (bias [batch, head, query, key], positions t of the queries [batch, head, query])."""
        n_queries, n_keys = allowed.shape
        rows = torch.arange(n_keys - n_queries, n_keys, device=q.device)
        bias = self.rows_bias(q, rows, torch.arange(n_keys, device=q.device))
        return bias, rows.float().expand(q.shape[0], q.shape[1], -1)

    def query_rows_bias(self, hooked: dict[str, torch.Tensor], rows: torch.Tensor, scores: torch.Tensor,
                        row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        return self.rows_bias(rows, row_index, key_index)
