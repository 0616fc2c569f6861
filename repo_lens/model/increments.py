"""Mechanisms whose positions are a running sum of learned per-token increments.

- ``lpi``: learned position increments with one DeltaMLP shared by every layer, reading the
  token embeddings (the learned-increments post): δ = softplus(MLP(e)), position = Σ_{s≤t} δ_s.
- ``lpi-head``: as ``lpi`` with one δ per head (the post's shared ``per_head_delta``);
- ``lpi-table``: the post's frozen δ table, δ = deltas[token id] per head, no DeltaMLP;
- ``lpi-layer``: one bounded DeltaMLP per layer reading that layer's attention input:
  δ = max_delta · sigmoid(MLP(h)) (the learned-increments post bounds it at 10 so it cannot explode).
- ``grape-m``: multiplicative GRAPE with a content-dependent phase (the GRAPE paper): one
  ω = softplus(W h + b) per head, phase = exclusive running sum Σ_{s<t} ω_s.

All three rotate q and k with RoPE's frequencies at these real-valued positions, so q·k depends
only on the difference of two positions. Every mechanism publishes the increments it sums through
``hook_delta`` [batch, head, pos]; replacing them there changes the positions the layer uses.
With a KV cache the running sum continues from the cached tokens (``state["carry"]``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.hooking import editable
from repo_lens.model.config import ModelConfig

SOFTPLUS_ONE = math.log(math.e - 1.0)  # softplus(SOFTPLUS_ONE) == 1


class DeltaMLP(nn.Module):
    """Linear → GELU → Linear (the learned-increments post's DeltaMLP before its output squashing)."""

    def __init__(self, d_model: int, d_hidden: int, n_out: int, output_bias: float) -> None:
        super().__init__()
        self.fc_in = nn.Linear(d_model, d_hidden)
        self.fc_out = nn.Linear(d_hidden, n_out)
        nn.init.zeros_(self.fc_in.bias)
        nn.init.constant_(self.fc_out.bias, output_bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h32 = h.float()
        with torch.autocast(h.device.type, enabled=False):  # fp32 under autocast too: the increments are summed
            hidden = F.gelu(F.linear(h32, self.fc_in.weight.float(), self.fc_in.bias.float()))
            return F.linear(hidden, self.fc_out.weight.float(), self.fc_out.bias.float())


class CumulativePositions(nn.Module):
    """Base: positions = carry + running sum of ``increments(h, shared)`` (inclusive unless ``exclusive``)."""

    role = "rotary"
    exclusive = False

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
        self.hook_delta = HookPoint()

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, h: torch.Tensor, offset: int = 0, state: dict | None = None,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        delta = self.hook_delta(editable(self.hook_delta, self.increments(h, shared)))
        inclusive = torch.cumsum(delta, dim=-1)
        if state is not None and "carry" in state:
            inclusive = inclusive + state["carry"]
        if state is not None:
            state["carry"] = inclusive[..., -1:].detach()
        return inclusive - delta if self.exclusive else inclusive


class SharedIncrementPositions(CumulativePositions):
    """The learned-increments post, shared variant: one δ per token from the embeddings, the same in every layer and
    head. The DeltaMLP lives on the model (``LensModel.shared_delta``); its δ arrives as ``shared``."""

    kind = "lpi"

    @staticmethod
    def shared_module(cfg: ModelConfig) -> nn.Module:
        """The model-level module whose δ the layers of this kind share (``LensModel.shared_delta``)."""
        return shared_delta_mlp(cfg)

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        if shared is None:
            raise ValueError(f"{self.kind} layers need the model's shared increments; run them through LensModel")
        if shared.dim() == 3:  # [batch, pos, head]: one δ per head
            return shared.transpose(1, 2)
        return shared[:, None, :].expand(h.shape[0], self.n_heads, h.shape[1])


class SharedHeadIncrementPositions(SharedIncrementPositions):
    """The post's shared per-head variant (``per_head_delta``): δ_h = softplus(DeltaMLP(e))_h from the embeddings,
    one δ per token and head, the same in every layer; each head its own running sum."""

    kind = "lpi-head"

    @staticmethod
    def shared_module(cfg: ModelConfig) -> nn.Module:
        return DeltaMLP(cfg.d_model, cfg.lpi_hidden_dim, cfg.n_heads, output_bias=SOFTPLUS_ONE)


class DeltaTable(nn.Module):
    """The post's frozen δ table: a fixed δ per vocabulary id and head (not trained), ones (integer positions)
    until loaded. Stored flat, ``deltas`` [vocab·head] (a vector, which no matrix initialisation touches);
    ``table`` is its [vocab, head] view."""

    def __init__(self, vocab_size: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.deltas = nn.Parameter(torch.ones(vocab_size * n_heads), requires_grad=False)

    @property
    def table(self) -> torch.Tensor:
        """δ [vocab, head]."""
        return self.deltas.view(-1, self.n_heads)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[batch, pos] token ids -> δ [batch, pos, head] (fp32)."""
        return self.table.float()[input_ids]


class TableIncrementPositions(SharedIncrementPositions):
    """The post's frozen δ table: δ = deltas[token id] (per head), positions = Σ_{s≤t} δ_s, the same in every layer;
    the table (``LensModel.shared_delta``) holds ones, integer positions, until a checkpoint fills it."""

    kind = "lpi-table"

    @staticmethod
    def shared_module(cfg: ModelConfig) -> nn.Module:
        return DeltaTable(cfg.vocab_size, cfg.n_heads)


class LayerIncrementPositions(CumulativePositions):
    """The learned-increments post, per-layer variant: δ = max_delta · sigmoid(DeltaMLP(h)) from this layer's input,
    initialised so δ = 1 (integer RoPE) everywhere."""

    kind = "lpi-layer"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.max_delta = float(cfg.lpi_max_delta)
        one = math.log(1.0 / (self.max_delta - 1.0))  # logit(1 / max_delta)
        self.delta_mlp = DeltaMLP(cfg.d_model, cfg.lpi_hidden_dim, 1, output_bias=one)

    def start_at_integers(self) -> None:
        """δ = 1 for every input: the output weight 0 and its bias logit(1/max_delta); the input layer at
        PyTorch's default initialisation (from the global seed), so that training can move δ at once."""
        self.delta_mlp.fc_in.reset_parameters()
        nn.init.zeros_(self.delta_mlp.fc_in.bias)
        nn.init.zeros_(self.delta_mlp.fc_out.weight)
        nn.init.constant_(self.delta_mlp.fc_out.bias, math.log(1.0 / (self.max_delta - 1.0)))

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        delta = self.max_delta * torch.sigmoid(self.delta_mlp(h))  # [batch, pos, 1]
        return delta.transpose(1, 2).expand(h.shape[0], self.n_heads, h.shape[1])


class ContentPhasePositions(CumulativePositions):
    """GRAPE-M with a content-dependent phase: ω = softplus(W h + b) per head, phase_t = Σ_{s<t} ω_s.
    ``b`` starts at softplus⁻¹(1) so the layer starts as RoPE (shifted by one, which q·k cannot see)."""

    kind = "grape-m"
    exclusive = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.phase_map = nn.Linear(cfg.d_model, cfg.n_heads)
        nn.init.constant_(self.phase_map.bias, SOFTPLUS_ONE)

    def start_at_integers(self) -> None:
        """ω = 1 for every input (W = 0, b = softplus⁻¹(1)): the phase is the index, the layer is RoPE."""
        nn.init.zeros_(self.phase_map.weight)
        nn.init.constant_(self.phase_map.bias, SOFTPLUS_ONE)

    def increments(self, h: torch.Tensor, shared: torch.Tensor | None) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):  # fp32 under autocast too: the phases are summed
            omega = F.softplus(F.linear(h.float(), self.phase_map.weight.float(), self.phase_map.bias.float()))
        return omega.transpose(1, 2)


def shared_delta_mlp(cfg: ModelConfig) -> DeltaMLP:
    """The model-level DeltaMLP of ``lpi`` models: δ = softplus(·) with δ = 1 at initialisation."""
    return DeltaMLP(cfg.d_model, cfg.lpi_hidden_dim, 1, output_bias=SOFTPLUS_ONE)


def is_position_weight(name: str) -> bool:
    """Whether the LensModel weight ``name`` belongs to a position mechanism: a layer's own
    (``blocks.{l}.attn.mechanism.``) or the increments the layers share (``shared_delta.``).

    >>> [is_position_weight(name) for name in ("blocks.2.attn.mechanism.delta_mlp.fc_in.weight",
    ...                                        "shared_delta.fc_out.bias", "blocks.2.attn.q_proj.weight")]
    [True, True, False]
    """
    return ".attn.mechanism." in name or name.startswith("shared_delta.")
