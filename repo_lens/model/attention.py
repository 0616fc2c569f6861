"""Causal self-attention whose rotary positions come from a pluggable mechanism."""

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
from repo_lens.model.hooking import editable, project_heads, wants
from repo_lens.model.layers import RMSNorm
from repo_lens.model.pattern import causal_mask, hooked_attention
from repo_lens.model.registry import NO_DECAY, build_position_mechanism
from repo_lens.model.rotary import RopeSettings, apply_rotary, rope_frequencies, rotary_cos_sin

__all__ = ["Attention", "causal_mask"]


class Attention(AttentionWeights, nn.Module):
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

    positions: Any  # the layer's position mechanism (the registry's nn.Module: role, logit_bias, … by kind)
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
        self.positions = build_position_mechanism(self.kind, cfg)
        inv_freq, self.attention_scaling = rope_frequencies(
            self.d_head, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.rope = RopeSettings(self.d_head, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings)

        self.hook_pos = HookPoint()  # [batch, head, pos]
        self.hook_q = HookPoint()  # [batch, pos, head, d_head] (q_proj's output: before q_norm and rotation)
        self.hook_k = HookPoint()  # [batch, pos, kv_head, d_head] (k_proj's output: before k_norm and rotation)
        self.hook_v = HookPoint()  # [batch, pos, kv_head, d_head] (v_proj's output)
        self.hook_rot_q = HookPoint()  # [batch, pos, head, d_head] (the queries q·k uses: normed, rotated)
        self.hook_rot_k = HookPoint()  # [batch, pos, kv_head, d_head] (the keys q·k uses; per query head where positions differ in a group)
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos] (only when hooked)
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos] (only when hooked)
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]
        self.hook_result = HookPoint()  # [batch, pos, head, d_model] (each head's share of the output; only when hooked)
        self.decay_name = cfg.decay
        self.decay_rows = DecayRows() if cfg.decay != NO_DECAY else None
        if self.decay_rows is not None:
            self.hook_decay = HookPoint()  # [batch, head, pos]

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
        mechanism = self.positions
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
        encode = getattr(self.positions, "encode", apply_rotary)  # PoPE kinds keep only the pair norms' phase
        return encode(q, cos, sin), encode(k, cos[:, ::group], sin[:, ::group])

    def _mechanism_bias(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None,
                        allowed: torch.Tensor | None, state: dict | None) -> torch.Tensor | None:
        """The bias an additive or contextual mechanism adds to q·k/√d (None for a rotary one); a contextual
        mechanism's positions pass through ``hook_pos`` here."""
        mechanism = self.positions
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
