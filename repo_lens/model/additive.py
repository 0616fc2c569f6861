"""Mechanisms that add a bias to the attention logits instead of rotating q and k.

- ``fox``: Forgetting Transformer forget gates (the GRAPE-A special case in the GRAPE paper):
  f_t = sigmoid(w_h·h_t + b_h) per head; logit_ij += Σ_{l=j+1}^{i} log f_l. We publish
  δ_t = −log f_t through ``hook_delta`` and positions = Σ_{s≤t} δ_s (``hook_pos``), so the bias is
  −(position_i − position_j): a head that forgets fast spreads tokens far apart.
- ``cope``: contextual position encoding (the CoPE paper, Eq. 3–9 and Listing 1): gates
  g_ij = sigmoid(q_i·k_j/√d) (the scaled logits, as in the paper's code), p_ij = Σ_{t=j}^{i} g_it
  clamped to p_max, logit_ij += interpolation of q_i·e[⌊p_ij⌋] and q_i·e[⌈p_ij⌉].
- ``grape-ap``: path-integral additive GRAPE (the GRAPE paper): logit_tj += Σ_{l=j+1}^{t} ψ(t, l) with
  the edge potential ψ(t, l) = log sigmoid(q_t·k_l/√d + b_h) — a query-dependent forget gate, so
  FoX is the special case where ψ does not depend on t. (the GRAPE paper gives b_h(t, j) = Σ ψ_h(t, l)
  but not ψ; this is our reading, documented in the README.)

CoPE and GRAPE-AP positions depend on the query. Their ``hook_pos`` shows the positions *as seen
from the last query of the forward pass*: δ_j = the last query's gate on key j (CoPE) or −ψ(T, j)
(GRAPE-AP), published through ``hook_delta``, and position_j = Σ_{s≤j} δ_s. For CoPE,
p_{T,j} = position_T − position_j + δ_j (before clamping); for GRAPE-AP the bias of the last query is
−(position_T − position_j). ``hook_query_delta`` [batch, head, query_pos, key_pos] holds every
query's δ (hook_delta is its last row; a right-padded batch reads each sequence's own last query
there). These hooks are read-outs: the layer uses the full query × key
gates (CoPE ``hook_gates``) or potentials (GRAPE-AP ``hook_potential``), [batch, head, query_pos, key_pos].

Every mechanism here answers ``query_rows_bias``: the bias of a block of query rows over the keys,
from the layer's hooks named in ``row_bias_hooks`` (``analysis.attention_mass`` needs nothing more).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.config import ModelConfig


class KeyMinusQueryBias:
    """The "additive" role: the layer adds key_position − query_position to the logits (e.g. FoX).

    Mixed into an ``nn.Module`` whose forward returns the positions [batch, head, pos] (``hook_pos``).
    """

    role = "additive"
    row_bias_hooks: tuple[str, ...] = ("hook_pos",)  # attention hooks query_rows_bias reads

    @staticmethod
    def logit_bias(query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """[..., query, key] bias key_position_j − query_position_i.

        >>> KeyMinusQueryBias.logit_bias(torch.tensor([2.0]), torch.tensor([0.0, 1.0, 2.0]))
        tensor([[-2., -1.,  0.]])
        """
        return key_positions[..., None, :] - query_positions[..., :, None]

    def query_rows_bias(self, hooked: dict[str, torch.Tensor], rows: torch.Tensor, scores: torch.Tensor,
                        row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        """The bias [head, rows, keys] of query rows ``row_index`` over keys ``key_index``, from the
        layer's positions ``hooked["hook_pos"]`` [head, pos] of one sequence."""
        positions = hooked["hook_pos"]
        return self.logit_bias(positions[:, row_index], positions[:, key_index])


class ForgetGatePositions(KeyMinusQueryBias, nn.Module):
    """FoX: positions are the running sum of −log f; the layer adds −(position_i − position_j)
    = Σ_{l=j+1}^{i} log f_l."""

    kind = "fox"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.forget_gate = nn.Linear(cfg.d_model, cfg.n_heads)
        nn.init.constant_(self.forget_gate.bias, cfg.forget_bias_init)
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_delta = HookPoint()

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        logit = F.linear(h.float(), self.forget_gate.weight.float(), self.forget_gate.bias.float())
        delta = self.hook_delta(F.softplus(-logit).transpose(1, 2))  # −log sigmoid(x) = softplus(−x)
        positions = torch.cumsum(delta, dim=-1)
        if state is not None and "carry" in state:
            positions = positions + state["carry"]
        if state is not None:
            state["carry"] = positions[..., -1:].detach()
        return positions


class _QueryKeyPositions(nn.Module):
    """Base for mechanisms whose bias comes from every query-key pair's logit."""

    role = "contextual"
    row_bias_hooks: tuple[str, ...] = ()  # the bias of a query row needs only that row's q and the keys

    def __init__(self) -> None:
        super().__init__()
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_delta = HookPoint()
        # every query's increments over the keys (hook_delta is the last row); a read-out, so a
        # right-padded batch can take each sequence's own last query
        self.hook_query_delta = HookPoint()

    def query_rows_bias(self, hooked: dict[str, torch.Tensor], rows: torch.Tensor, scores: torch.Tensor,
                        row_index: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
        """The bias [head, rows, keys] of the query rows ``rows`` [head, rows, d_head] of one sequence,
        whose scaled scores over the keys (−inf after each row) are ``scores``."""
        allowed = key_index[None, :] <= row_index[:, None]
        return self(rows[None], scores[None], allowed)[0][0]

    @staticmethod
    def last_query_positions(delta: torch.Tensor, n_new: int) -> torch.Tensor:
        """Running sum of the last query's increments over its keys, for the ``n_new`` newest tokens."""
        return torch.cumsum(delta, dim=-1)[..., -n_new:]


class ContextualPositions(_QueryKeyPositions):
    """CoPE (the CoPE paper). ``position_embeddings`` is e[0..p_max] as columns, shared by the layer's heads."""

    kind = "cope"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_gates = HookPoint()
        self.max_position = int(cfg.cope_max_position)
        self.position_embeddings = nn.Parameter(torch.zeros(cfg.d_head, self.max_position + 1))

    def forward(self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [batch, head, query, d_head]; scores = q·k/√d fp32 [batch, head, query, key]; allowed:
        boolean causal mask [query, key]. Returns (logit bias, last-query positions)."""
        gates = self.hook_gates(torch.sigmoid(scores)).masked_fill(~allowed, 0.0)  # keys after the query never count
        pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=float(self.max_position))
        floor = pos.floor()
        weight = pos - floor
        floor = floor.long()
        ceil = torch.clamp(floor + 1, max=self.max_position)  # where pos is an integer weight is 0
        logits_at = q.float() @ self.position_embeddings.float()  # [batch, head, query, p_max + 1]
        bias = logits_at.gather(-1, ceil) * weight + logits_at.gather(-1, floor) * (1.0 - weight)
        delta = self.hook_delta(self.hook_query_delta(gates)[:, :, -1, :])
        return bias, self.last_query_positions(delta, q.shape[2])


class PathIntegralPositions(_QueryKeyPositions):
    """GRAPE-AP: bias_tj = Σ_{l=j+1}^{t} log sigmoid(q_t·k_l/√d + b_h)."""

    kind = "grape-ap"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_potential = HookPoint()
        self.potential_bias = nn.Parameter(torch.full((cfg.n_heads,), float(cfg.forget_bias_init)))

    def forward(self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        potential = F.logsigmoid(scores + self.potential_bias.float()[None, :, None, None])
        potential = self.hook_potential(potential.masked_fill(~allowed, 0.0)).masked_fill(~allowed, 0.0)  # ψ(t, l)
        through = potential.flip(-1).cumsum(-1).flip(-1)  # Σ_{l≥j} ψ(t, l)
        bias = through - potential  # Σ_{l>j} ψ(t, l)
        delta = self.hook_delta(self.hook_query_delta(-potential)[:, :, -1, :])
        return bias, self.last_query_positions(delta, q.shape[2])
