"""GRAPE-AP as the GRAPE authors' code runs it (``llama-mha-grape-ap-v1.py``): with p_t = c_p(x_t) per
head (or tied to q, k or v: ``p_tie_mode``), p̂_t = rms_norm(p_t) rotated by the angle t in every plane
(their ``Rotary(d_p, base=1)``: every frequency is 1), the edge potential is
ψ(i, l) = m_h·logsigmoid(p_i·R(l)p̂_l / d_p) and logit_ij += Σ_{l=j+1}^{i} ψ(i, l) (m_h: ALiBi's slopes).

The query side uses the raw p_i, the key side the normalised, rotated p̂_l, and the logit is divided by
d_p, not √d_p: all as their code has it. That is another equation than the zoo's ``grape-ap``
(ψ = log sigmoid(q·k/√d + b_h)), so it is a kind of its own, ``grape-ap-rotated``; it reads the layer input,
which only their attention hands a mechanism, so the registry lists that attention alone as running it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.errors import CheckpointError
from repo_lens.model.alibi import alibi_slopes
from repo_lens.model.authors.potentials import EdgePotentials
from repo_lens.model.authors.rotation import rotate
from repo_lens.model.config import ModelConfig

TIE_MODES = {"none": "none", "pqtie": "q", "pq": "q", "pktie": "k", "pk": "k", "pvtie": "v", "pv": "v"}


class PathPotentials(EdgePotentials):
    """The authors' GRAPE-AP (kind ``grape-ap-rotated``); ``cfg.extra["authors"]``: ``p_tie_mode``, ``p_head_dim``."""

    kind = "grape-ap-rotated"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        options = cfg.extra.get("authors", {})
        mode = str(options.get("p_tie_mode", "none")).lower()
        if mode not in TIE_MODES:
            raise CheckpointError(f"unknown p_tie_mode {mode!r}; the GRAPE authors' code offers {sorted(TIE_MODES)}")
        self.tied = TIE_MODES[mode]
        self.n_heads = cfg.n_heads
        self.d_p = cfg.d_head if self.tied != "none" else int(options.get("p_head_dim") or cfg.d_head)
        self.slopes = tuple(alibi_slopes(cfg.n_heads))
        if self.tied == "none":
            self.c_p = nn.Linear(cfg.d_model, cfg.n_heads * self.d_p, bias=False)

    def _p(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """p of the new tokens [batch, head, pos, d_p]."""
        n_new = q.shape[2]
        if self.tied == "none":
            return self.c_p(h).view(h.shape[0], n_new, self.n_heads, self.d_p).transpose(1, 2)
        return {"q": q, "k": k, "v": v}[self.tied][:, :, -n_new:]

    def edge_potentials(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h: torch.Tensor,
                        n_past: int, state: dict | None) -> torch.Tensor:
        p = self._p(q, k, v, h)
        t = torch.arange(n_past, n_past + p.shape[2], device=p.device, dtype=torch.float32)
        p_rot = rotate(F.rms_norm(p, (self.d_p,)), t[None, None, :, None].expand(*p.shape[:3], self.d_p // 2))
        if state is not None:
            past = state.get("p_rot")
            p_rot = p_rot if past is None else torch.cat((past, p_rot), dim=2)
            state["p_rot"] = p_rot.detach()
        logits = (torch.matmul(p, p_rot.transpose(-2, -1)) * (1.0 / self.d_p)).float()
        slopes = torch.tensor(self.slopes, dtype=torch.float32, device=p.device)[None, :, None, None]
        return F.logsigmoid(logits) * slopes

    def forward(self, q: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise TypeError("the GRAPE authors' GRAPE-AP reads the layer input; it runs in their attention "
                        "(repo_lens.model.authors.attention.AuthorsAttention)")
