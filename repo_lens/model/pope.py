"""PoPE at integer or learned positions (the learned-increments post's ``pope`` and ``selective_pope``).

PoPE (Milsom et al., arXiv:2509.10534, as the post's code applies it) decouples content from position: each
rotary pair of q and k is replaced by its softplus magnitude at the position's phase,

    q_i ↦ softplus(‖(q_{2i}, q_{2i+1})‖) · (cos pθ_i, sin pθ_i),

so q·k = Σ_i m_i(q) m_i(k) cos((p_q − p_k) θ_i): the content picks the weight of each band, the positions alone
its phase. Every kind here takes its positions from the mechanism it extends and encodes with
:func:`repo_lens.model.attention.apply_pope` instead of the rotation (``encode``).
"""

from __future__ import annotations

from repo_lens.model.increments import (
    SharedHeadIncrementPositions, SharedIncrementPositions, TableIncrementPositions,
)
from repo_lens.model.positions import IntegerPositions
from repo_lens.model.residual_increments import ResidualHeadIncrementPositions, ResidualIncrementPositions
from repo_lens.model.attention import apply_pope

POPE = staticmethod(apply_pope)


class IntegerPopePositions(IntegerPositions):
    """``pope``: PoPE at the token index t."""

    kind = "pope"
    encode = POPE


class SharedPopePositions(SharedIncrementPositions):
    """``lpi-pope``: PoPE at Σ δ, δ = softplus(DeltaMLP(embedding)) shared by every layer and head."""

    kind = "lpi-pope"
    encode = POPE


class SharedHeadPopePositions(SharedHeadIncrementPositions):
    """``lpi-head-pope``: PoPE at each head's Σ δ_h, δ from the shared DeltaMLP with one output per head."""

    kind = "lpi-head-pope"
    encode = POPE


class TablePopePositions(TableIncrementPositions):
    """``lpi-table-pope``: PoPE at Σ δ of the frozen δ table."""

    kind = "lpi-table-pope"
    encode = POPE


class ResidualPopePositions(ResidualIncrementPositions):
    """``lpi-resid-pope``: PoPE at the layer's Σ δ, δ from the residual stream entering the block."""

    kind = "lpi-resid-pope"
    encode = POPE


class ResidualHeadPopePositions(ResidualHeadIncrementPositions):
    """``lpi-resid-head-pope``: as ``lpi-resid-pope`` with one δ per head."""

    kind = "lpi-resid-head-pope"
    encode = POPE
