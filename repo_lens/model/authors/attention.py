"""Causal self-attention as the GRAPE and FoX authors' code runs it, with repo_lens' hooks.

Per layer: projections (``q_proj``; ``k_proj``/``v_proj`` plain or with the data-dependent token shift),
per-head qk-RMSNorm before or after the rotation (:class:`AttentionOptions`), the layer's position
mechanism (rotary: RoPE's index or GRAPE-M's phases at fixed or learned frequencies; additive: ALiBi,
FoX's forget gates; contextual: GRAPE-A's gated rates, GRAPE-AP's path potentials), softmax attention
at 1/√d_head, an optional per-head output norm and output gate, ``o_proj``.

Hooks are the zoo attention's (:class:`repo_lens.model.attention.Attention`), with the shapes of
:mod:`repo_lens.model.hook_shapes`: ``hook_q``/``hook_k``/``hook_v`` (the projections, token shift included,
before norm and rotation), ``hook_pos``, ``hook_rot_q``/``hook_rot_k`` (what q·k uses), ``hook_pattern``
(only when hooked), ``hook_z``; so traces, analyzers and interventions read these models as any other.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from repo_lens.model.compat.attention import AttentionWeights
from repo_lens.model.hooking import AttentionHooks, editable, project_heads
from repo_lens.model.attention import causal_mask
from repo_lens.model.authors.frequencies import FixedFrequencies, LearnedFrequencies
from repo_lens.model.authors.kv_shift import ShiftLinear
from repo_lens.model.authors.norms import HeadRMSNorm
from repo_lens.model.authors.options import AttentionOptions
from repo_lens.model.authors.pattern import attend
from repo_lens.model.authors.rotation import rotate, rotation_angles
from repo_lens.model.cache import KVCache
from repo_lens.model.config import ModelConfig
from repo_lens.model.registry import build_position_mechanism
from repo_lens.model.former_names import FormerMechanismName


class AuthorsAttention(FormerMechanismName, AttentionWeights, AttentionHooks, nn.Module):
    """One attention layer of a GRAPE or FoX authors' checkpoint (see the module docstring)."""

    mechanism: Any  # the layer's position mechanism (an authors' nn.Module: role, logit_bias, … by kind)

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.kind = layer, cfg.layer_mechanisms[layer]
        self.options = options = AttentionOptions.from_extra(cfg.extra)
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        width = cfg.n_heads * cfg.d_head
        self.q_proj = nn.Linear(cfg.d_model, width, bias=False)
        self.k_proj = self._projection(cfg, width, options.k_shift)
        self.v_proj = self._projection(cfg, width, options.v_shift)
        self.o_proj = nn.Linear(width, cfg.d_model, bias=False)
        if options.qk_norm != "none":
            self.q_norm = HeadRMSNorm(cfg.n_heads, cfg.d_head, options.qk_norm == "group", options.qk_norm_eps)
            self.k_norm = HeadRMSNorm(cfg.n_heads, cfg.d_head, options.qk_norm == "group", options.qk_norm_eps)
        if options.output_norm != "none":
            self.out_norm = HeadRMSNorm(cfg.n_heads, cfg.d_head, options.output_norm == "group", options.output_norm_eps)
        if options.output_gate != "none":
            self.ogate_proj = nn.Linear(cfg.d_model, width, bias=False)
        self.mechanism = build_position_mechanism(self.kind, cfg, attention="authors")  # the registry's module
        self.rotary = self._frequencies(cfg, options)
        self.add_attention_hooks()  # shapes and meanings: repo_lens.model.hook_shapes

    @staticmethod
    def _projection(cfg: ModelConfig, width: int, shifted: bool) -> nn.Module:
        if shifted:
            unshifted = bool(AttentionOptions.from_extra(cfg.extra).unshifted_single_token)
            return ShiftLinear(cfg.d_model, width, cfg.n_heads, unshifted_single_token=unshifted)
        return nn.Linear(cfg.d_model, width, bias=False)

    def _frequencies(self, cfg: ModelConfig, options: AttentionOptions) -> nn.Module | None:
        """The rotary frequencies when the layer rotates q and k (None when it does not)."""
        if self.mechanism.role != "rotary" and not options.rope:
            return None
        if options.learned_frequencies:
            return LearnedFrequencies(cfg.n_heads, cfg.d_head, options.frequencies_shared, options.frequency_scale)
        return FixedFrequencies(cfg.n_heads, cfg.d_head, options.rope_base)

    def _project(self, h: torch.Tensor, state: dict | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [batch, pos, head, d_head] through hook_q/hook_k/hook_v (token shift continued from ``state``)."""
        batch, pos, _ = h.shape
        split = (batch, pos, self.n_heads, self.d_head)
        outputs = [self.q_proj(h)]
        for name, projection in (("k", self.k_proj), ("v", self.v_proj)):
            if isinstance(projection, ShiftLinear):
                shifted, last = projection(h, None if state is None else state.get(f"{name}_shift"))
                if state is not None:
                    state[f"{name}_shift"] = last.detach()
                outputs.append(shifted)
            else:
                outputs.append(projection(h))
        q, k, v = (hook(out.view(split)) for hook, out in zip((self.hook_q, self.hook_k, self.hook_v), outputs))
        return q, k, v

    def _qk_norm(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.options.qk_norm == "none":
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k [batch, pos, head, d_head] rotated at ``positions`` [batch, head, pos]."""
        assert self.rotary is not None  # called only for a layer that rotates
        angles = rotation_angles(positions, self.rotary(positions.device)).transpose(1, 2)
        if self.options.neox_rotation:  # FoX's package rotates by +angle (rotate_half), GRAPE by −angle
            angles = -angles
        return rotate(q, angles), rotate(k, angles)

    def forward(self, h: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        batch, pos, _ = h.shape
        state = cache.position_states[self.layer] if cache is not None else None
        q, k, v = self._project(h, state)
        rotates, norm_first = self.rotary is not None, self.options.qk_norm_before_rotation
        if norm_first or not rotates:
            q, k = self._qk_norm(q, k)
        positions = None
        if self.mechanism.role != "contextual":
            positions = self.hook_pos(editable(self.hook_pos, self.mechanism(h, offset, state=state, shared=shared)))
        if rotates:
            index = torch.arange(offset, offset + pos, device=h.device, dtype=torch.float32)
            at = positions if self.mechanism.role == "rotary" else index.expand(batch, self.n_heads, pos)
            assert at is not None  # a rotary mechanism gives positions
            q, k = self._rotate(q, k, at)
            if not norm_first:
                q, k = self._qk_norm(q, k)
        q, k, v = self.hook_rot_q(q).transpose(1, 2), self.hook_rot_k(k).transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            k, v = cache.append(self.layer, k, v)
        z = self.hook_z(self._attend(h, q, k, v, positions, state).transpose(1, 2))
        return self._output(z, h)

    def _bias(self, h, q, k, v, positions, state, allowed) -> torch.Tensor | None:
        """The logit bias [batch, head, query, key] of the layer's mechanism (None for rotary ones)."""
        role = self.mechanism.role
        if role == "additive":
            key_positions = positions
            if state is not None:
                past = state.get("key_positions")
                key_positions = positions if past is None else torch.cat((past, positions), dim=-1)
                state["key_positions"] = key_positions.detach()
            return self.mechanism.logit_bias(positions, key_positions)
        if role == "contextual":
            psi = self.mechanism.edge_potentials(q, k, v, h, k.shape[2] - q.shape[2], state)
            bias, shown = self.mechanism.bias_and_positions(psi, allowed)
            self.hook_pos(editable(self.hook_pos, shown))
            return bias
        return None

    def _attend(self, h, q, k, v, positions, state) -> torch.Tensor:
        allowed = causal_mask(q.shape[2], k.shape[2], h.device)
        bias = self._bias(h, q, k, v, positions, state, allowed)
        return attend(q, k, v, allowed, bias, self.hook_pattern, self.hook_attn_scores)

    def _output(self, z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """o_proj of z [batch, pos, head, d_head] after the output norm and gate."""
        batch, pos = z.shape[:2]
        if self.options.output_norm != "none":
            z = self.out_norm(z)
        out = z.reshape(batch, pos, self.n_heads * self.d_head)
        if self.options.output_gate != "none":
            gate = self.ogate_proj(h)
            out = (F.silu(gate) if self.options.output_gate == "silu" else torch.sigmoid(gate)) * out
        return project_heads(self.o_proj, out.view(batch, pos, self.n_heads, self.d_head), self.hook_result)
