"""ALiBi (Press et al., 2022): a fixed linear bias, GRAPE-A's other exact special case (the GRAPE paper).

Head h adds −m_h·(i − j) to the logit of query i on key j; q and k are not rotated. The slopes are
fixed, not learned: m_h = 2^(−8h/H) for h = 1..H when H is a power of two. For other H we follow the
ALiBi paper's rule: the slopes of the largest power of two n < H, then every other slope of 2n
(2^(−8h/2n) for h = 1, 3, 5, …), which fall between n's slopes, until there are H.

ALiBi is FoX with a constant forget gate f_h = exp(−m_h), and it is shown the same way: the layer
publishes δ_t = −log f_h = m_h through ``hook_delta`` [batch, head, pos] and the positions
position_t = Σ_{s<t} δ_s = m_h·t through ``hook_pos`` (the index scaled by the head's slope; with a
KV cache the absolute index, continued from the cached tokens). The bias is
position_j − position_i = −m_h·(i − j), so heads differ only by their slope, and writing to either
hook changes the bias the layer uses (δ = 0 turns the layer into NoPE).
"""

from __future__ import annotations

import math

import torch

from repo_lens.model.additive import KeyMinusQueryBias
from repo_lens.model.config import ModelConfig
from repo_lens.model.increments import CumulativePositions


def alibi_slopes(n_heads: int) -> list[float]:
    """ALiBi's head slopes m_1..m_H (see the module docstring for H that is not a power of two).

    >>> alibi_slopes(4)
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> [math.log2(m) for m in alibi_slopes(6)]
    [-2.0, -4.0, -6.0, -8.0, -1.0, -3.0]
    """
    if n_heads < 1:
        raise ValueError(f"ALiBi needs at least one head; got n_heads={n_heads}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    power = 2 ** int(math.floor(math.log2(n_heads)))
    if power == n_heads:
        return geometric(n_heads)
    return geometric(power) + geometric(2 * power)[0::2][: n_heads - power]


class AlibiPositions(KeyMinusQueryBias, CumulativePositions):
    """ALiBi: positions m_h·t, the exclusive running sum of the constant increments m_h; the layer
    adds position_j − position_i = −m_h·(i − j) to the logits.

    Example:
        >>> cfg = ModelConfig(family="olmo2", vocab_size=8, d_model=16, n_layers=1, n_heads=2, d_mlp=8,
        ...                   layer_mechanisms=["alibi"])
        >>> AlibiPositions(cfg)(torch.zeros(1, 3, 16))
        tensor([[[0.0000, 0.0625, 0.1250],
                 [0.0000, 0.0039, 0.0078]]])
    """

    kind = "alibi"
    exclusive = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.slopes = tuple(alibi_slopes(cfg.n_heads))  # fixed: neither a parameter nor a saved buffer

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        slopes = torch.tensor(self.slopes, dtype=torch.float32, device=h.device)
        return slopes[None, :, None].expand(h.shape[0], len(self.slopes), h.shape[1])
