"""Causal self-attention whose rotary positions come from a pluggable mechanism: the projections, the layer's
positions from its mechanism, the rotation at those positions (:func:`apply_rotary`, or PoPE's
:func:`apply_pope`), and the scores and pattern, materialised only for the hooks that ask for them
(:func:`hooked_attention`). The rotation's frequencies are in :mod:`repo_lens.model.rotary`."""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from repo_lens.model.cache import KVCache
from repo_lens.model.config import ModelConfig
from repo_lens.model.compat.attention import AttentionWeights
from repo_lens.model.decay import LEVELS_STATE, DecayRows, decay_bias, decay_levels, missing_decay
from repo_lens.model.former_names import FormerMechanismName
from repo_lens.model.hooking import AttentionHooks, editable, project_heads, through, wants
from repo_lens.model.layers import RMSNorm
from repo_lens.model.registry import NO_DECAY, build_position_mechanism
from repo_lens.model.rotary import RopeSettings, rope_frequencies

__all__ = ["Attention", "apply_pope", "apply_rotary", "causal_mask", "hooked_attention", "rotary_cos_sin"]


class Attention(FormerMechanismName, AttentionWeights, AttentionHooks, nn.Module):
    """Multi-head (or grouped-query) attention. OLMo-2 adds RMSNorm over the whole q and k
    projections. Where learned positions differ between the query heads of a GQA group, keys are
    repeated to one per query head before rotation (each head rotates the shared key by its own
    positions); otherwise they are rotated per key head and repeated after.

    Hooks follow TransformerLens where they mean the same thing: ``hook_q`` / ``hook_k`` /
    ``hook_v`` are the projections split into heads (before OLMo-2's q_norm / k_norm and the
    rotation; GQA keys and values per key head), ``hook_rot_q`` / ``hook_rot_k`` the queries and
    keys that enter q·k (after the norm and the rotation; GQA keys per key head where the heads of a
    group share their positions, as in RoPE layers, else per query head). Each hook sees a view, so
    a hook that is not attached costs nothing and leaves the output bit-identical.

    In a model with a decay (``ModelConfig.decay``, :mod:`repo_lens.model.decay`), the layer sums the model's
    log α into its levels A (``hook_decay``) and adds A_i − A_j to its scores."""

    mechanism: Any  # the layer's position mechanism (the registry's nn.Module: role, logit_bias, … by kind)
    inv_freq: torch.Tensor  # a buffer

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.kind = cfg.layer_mechanisms[layer]
        self.n_heads, self.n_kv_heads, self.d_head = cfg.n_heads, int(cast(int, cfg.n_kv_heads)), cfg.d_head
        q_width, kv_width = self.n_heads * self.d_head, self.n_kv_heads * self.d_head
        self.q_proj = nn.Linear(cfg.d_model, q_width, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.d_model, kv_width, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.d_model, kv_width, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q_width, cfg.d_model, bias=cfg.attention_bias)
        self.qk_norm = cfg.family == "olmo2"
        if self.qk_norm:
            self.q_norm = RMSNorm(q_width, cfg.rms_norm_eps, weight_before_cast=True)
            self.k_norm = RMSNorm(kv_width, cfg.rms_norm_eps, weight_before_cast=True)
        self.mechanism = build_position_mechanism(self.kind, cfg)
        inv_freq, self.attention_scaling = rope_frequencies(
            self.d_head, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.rope = RopeSettings(self.d_head, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings)

        self.add_attention_hooks()  # shapes and meanings: repo_lens.model.hook_shapes
        self.decay_name = cfg.decay
        self.decay_rows = DecayRows() if cfg.decay != NO_DECAY else None
        if self.decay_rows is not None:
            # the hooks' shapes and what they hold: repo_lens.model.hook_shapes
            self.hook_decay = HookPoint()

    def _project(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [batch, head, pos, d_head], k and v [batch, kv_head, pos, d_head] of the block input ``h``,
        through hook_q / hook_k / hook_v (views of the projections) and OLMo-2's q_norm / k_norm."""
        batch, pos, _ = h.shape
        q = self.hook_q(self.q_proj(h).view(batch, pos, self.n_heads, self.d_head))
        k = self.hook_k(self.k_proj(h).view(batch, pos, self.n_kv_heads, self.d_head))
        v = self.hook_v(self.v_proj(h).view(batch, pos, self.n_kv_heads, self.d_head))
        if self.qk_norm:  # RMSNorm over the whole projection, across the heads
            q = self.q_norm(q.reshape(batch, pos, -1)).view(batch, pos, self.n_heads, self.d_head)
            k = self.k_norm(k.reshape(batch, pos, -1)).view(batch, pos, self.n_kv_heads, self.d_head)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _per_query_head(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, kv_head, pos, d_head] -> [batch, head, pos, d_head], repeating GQA key heads."""
        if x.shape[1] != self.n_heads:
            x = x.repeat_interleave(self.n_heads // x.shape[1], dim=1)
        return x

    def _shared_in_groups(self, positions: torch.Tensor) -> bool:
        """Whether the query heads of each GQA group share their positions: RoPE's are one row expanded;
        positions a hook has seen are compared (a hook may have written them)."""
        if self.n_kv_heads == self.n_heads or positions.stride(1) == 0:
            return True
        if not wants(self.hook_pos):
            return False
        grouped = positions.unflatten(1, (self.n_kv_heads, -1))
        return bool((grouped == grouped[:, :, :1]).all())

    QUERY_ROWS = True  # forward takes query_from (blocks check this before passing it)

    def forward(self, h: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None, query_from: int = 0,
                residual: torch.Tensor | None = None, *, decay: torch.Tensor | None = None) -> torch.Tensor:
        """The attention output of ``h`` [batch, pos, d_model]; with ``query_from``, only of the rows from
        there on (every token still a key: what a caller that reads only the last rows needs). ``residual``:
        the residual stream entering the block, which a mechanism with ``reads_residual`` reads instead of ``h``.
        ``decay``: the model's log α [batch, head, pos] of these tokens, in a model with a decay."""
        batch, pos, _ = h.shape
        mechanism = self.mechanism
        state = cache.position_states[self.layer] if cache is not None else None
        q, k, v = self._project(h)
        positions = None
        if mechanism.role != "contextual":
            source = residual if residual is not None and getattr(mechanism, "reads_residual", False) else h
            positions = self.hook_pos(editable(self.hook_pos, mechanism(source, offset, state=state, shared=shared)))
        if positions is not None and mechanism.role == "rotary":
            q, k = self._rotate(q, k, positions, offset + pos)
        # hooks see [batch, pos, head, d_head] views of what q·k uses (rotated where the layer rotates)
        q, k = self.hook_rot_q(q.transpose(1, 2)).transpose(1, 2), self.hook_rot_k(k.transpose(1, 2)).transpose(1, 2)
        k, v = self._per_query_head(k), self._per_query_head(v)
        if cache is not None:
            k, v = cache.append(self.layer, k, v)
        if query_from and mechanism.role == "rotary":  # the queries' own positions are already applied
            q, pos, query_from = q[:, :, query_from:], pos - query_from, 0
        n_keys = k.shape[2]
        levels = self._decay_levels(decay, state) if self.decay_rows is not None else None
        plain = mechanism.role == "rotary" and levels is None
        allowed = None if plain and n_keys == pos else causal_mask(pos, n_keys, h.device)
        bias: torch.Tensor | None
        if levels is not None:  # a decay: A_i − A_j of the query rows (the last pos of the new tokens) over every key
            bias = decay_bias(levels[0][..., levels[0].shape[-1] - pos:], levels[1])
        else:
            bias = self._mechanism_bias(q, k, positions, allowed, state)
        if bias is None:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=allowed is None)
        else:
            assert allowed is not None  # a bias (a decay, an additive or contextual layer) comes with a mask
            bias = bias.masked_fill(~allowed, float("-inf"))
            z = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bias).to(v.dtype)
        z = hooked_attention(q, k, v, z, allowed, bias, self.hook_attn_scores, self.hook_pattern)
        z = self.hook_z(z.transpose(1, 2))[:, query_from:]
        return project_heads(self.o_proj, z, self.hook_result)

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                n_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k rotated (or PoPE-encoded) at ``positions`` [batch, head, pos]; GQA keys repeated per query head
        first where the heads of a group have different positions."""
        inv_freq = self.rope.inv_freq_at(n_tokens, self.inv_freq)  # dynamic NTK: from the token count
        if not self._shared_in_groups(positions):
            k = self._per_query_head(k)
        cos, sin = rotary_cos_sin(positions, inv_freq, self.attention_scaling)
        group = self.n_heads // k.shape[1]
        encode = getattr(self.mechanism, "encode", apply_rotary)  # PoPE kinds keep only the pair norms' phase
        return encode(q, cos, sin), encode(k, cos[:, ::group], sin[:, ::group])

    def _mechanism_bias(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None,
                        allowed: torch.Tensor | None, state: dict | None) -> torch.Tensor | None:
        """The bias an additive or contextual mechanism adds to q·k/√d (None for a rotary one); a contextual
        mechanism's positions pass through ``hook_pos`` here."""
        mechanism = self.mechanism
        if mechanism.role == "additive":
            assert positions is not None  # an additive mechanism's forward gave them
            key_positions = positions
            if state is not None:
                past = state.get("key_positions")
                key_positions = positions if past is None else torch.cat((past, positions), dim=-1)
                state["key_positions"] = key_positions.detach()
            return mechanism.logit_bias(positions, key_positions)
        if mechanism.role == "contextual":
            assert allowed is not None  # only a rotary layer's square pattern goes without a mask
            scores = self._scores(q, k).masked_fill(~allowed, float("-inf"))
            bias, contextual_positions = mechanism(q, scores, allowed)
            self.hook_pos(editable(self.hook_pos, contextual_positions))
            return bias
        return None

    def _decay_levels(self, log_forget: torch.Tensor | None, state: dict | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the new tokens' decay levels A [batch, head, pos] through ``hook_decay``, every key's levels): a KV
        cache keeps the keys' levels, so later tokens continue from the last of them."""
        if log_forget is None:
            raise missing_decay(self.layer, self.decay_name)
        past = None if state is None else state.get(LEVELS_STATE)
        levels = self.hook_decay(editable(self.hook_decay, decay_levels(log_forget, past)))
        keys = levels if past is None else torch.cat((past, levels), dim=-1)
        if state is not None:
            state[LEVELS_STATE] = keys.detach()
        return levels, keys

    def _scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q.float() @ k.float().transpose(-1, -2)) / self.d_head**0.5


# the rotation at real-valued positions, then the pattern: the steps of the forward above, in its order

def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotary_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles z·inv_freq, fp32, shape [batch, head, pos, head_dim] (NeoX layout)."""
    angles = positions.float().unsqueeze(-1) * inv_freq.to(positions.device, torch.float32)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos() * attention_scaling, angles.sin() * attention_scaling


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [batch, head, pos, head_dim] (NeoX rotate-half convention); result in x's dtype."""
    rotated = x.float() * cos + rotate_half(x.float()) * sin
    return rotated.to(x.dtype)


def apply_pope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """PoPE (Milsom et al., arXiv:2509.10534) in the half-split layout: each pair (x_i, x_{i+d/2}) becomes
    softplus(‖pair‖)·(cos, sin) of the position's angle alone, so q·k = Σ_i m_i(q) m_i(k) cos((p_q − p_k) θ_i);
    x [batch, head, pos, head_dim], cos/sin from :func:`rotary_cos_sin`; result in x's dtype.

    >>> x = torch.tensor([[[[3.0, 0.0, 4.0, 1.0]]]])
    >>> cos, sin = rotary_cos_sin(torch.zeros(1, 1, 1), torch.ones(2))
    >>> [round(v, 4) for v in apply_pope(x, cos, sin).flatten().tolist()]
    [5.0067, 1.3133, 0.0, 0.0]
    """
    half = x.shape[-1] // 2
    x32 = x.float()
    magnitude = torch.nn.functional.softplus(torch.sqrt(x32[..., :half].square() + x32[..., half:].square()))
    return torch.cat((magnitude * cos[..., :half], magnitude * sin[..., :half]), dim=-1).to(x.dtype)


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> torch.Tensor:
    """Boolean [n_queries, n_keys], True where query i (the last n_queries of the keys) may attend.

    >>> causal_mask(2, 3, torch.device("cpu")).tolist()
    [[True, True, False], [True, True, True]]
    """
    query_index = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]
    return torch.arange(n_keys, device=device)[None, :] <= query_index


def hooked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fused: torch.Tensor,
                     allowed: torch.Tensor | None, bias: torch.Tensor | None, hook_attn_scores: HookPoint,
                     hook_pattern: HookPoint) -> torch.Tensor:
    """The attention output [batch, head, query, d_head] given the fused kernel's ``fused``: the scores
    (q·k/√d_head + bias, −inf where masked, fp32) and the pattern pass through their hooks when asked for,
    and the output is recomputed from the pattern only if a hook replaced or edited either, or a backward
    hook needs their gradient; otherwise ``fused`` itself, so reading hooks leave the output bit-identical.
    With autograd on, a reading hook's pattern is on the gradient's path (``retain_grad`` works): the
    output keeps the fused value and takes its gradient through the pattern.

    >>> q = k = v = torch.ones(1, 1, 2, 4)
    >>> out = hooked_attention(q, k, v, v, None, None, HookPoint(), HookPoint())
    >>> out is v
    True
    """
    if not (wants(hook_attn_scores) or wants(hook_pattern)):
        return fused
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if bias is not None:
        scores = scores + bias
    if allowed is None:
        allowed = causal_mask(q.shape[2], k.shape[2], q.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    edited_scores = through(hook_attn_scores, scores)
    if edited_scores is not None:
        scores = edited_scores
    pattern = scores.softmax(dim=-1)
    edited_pattern = through(hook_pattern, pattern)
    if edited_pattern is None and edited_scores is None:
        if not (torch.is_grad_enabled() and pattern.requires_grad):
            return fused
        # the hooks only read, but a gradient may be asked of what they saw (retain_grad): the output stays
        # the fused kernel's, bit for bit, and its gradient flows through the pattern instead of the kernel
        explicit = (pattern @ v.float()).to(v.dtype)
        return fused.detach() + (explicit - explicit.detach())
    pattern = pattern if edited_pattern is None else edited_pattern
    return (pattern @ v.float()).to(v.dtype)
