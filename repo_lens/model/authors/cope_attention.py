"""Self-attention of the CoPE authors' simple decoder (``projects/cope/src/models/transformer.py``
``MultiHeadAttn``, ``SelfAttn``; ``src/cope/context_position.py`` ``ContextPosSelfAttn``), with
repo_lens' hooks: biased projections ``proj_query``/``proj_key``/``proj_val``/``proj_out`` (and
``proj_key_cope``), logits q·k/√d plus the layer's biases: CoPE's (kind ``cope``), the shared learned
relative embeddings (kind ``rel``, or beside CoPE with ``--pos-emb cope+rel``), none (``nope``).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from repo_lens.model.compat.attention import AttentionWeights
from repo_lens.model.hooking import AttentionHooks, editable, project_heads
from repo_lens.model.attention import causal_mask
from repo_lens.model.authors.cope_relative import RelativePositions
from repo_lens.model.authors.pattern import attend
from repo_lens.model.cache import KVCache
from repo_lens.model.config import ModelConfig
from repo_lens.model.former_names import FormerMechanismName
from repo_lens.model.registry import build_position_mechanism


class CopeAttention(FormerMechanismName, AttentionWeights, AttentionHooks, nn.Module):
    """One attention layer of a CoPE authors' checkpoint."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.kind = layer, cfg.layer_mechanisms[layer]
        options = cfg.extra.get("authors", {})
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.gates_from = str(options.get("cope_gates_from", "keys"))  # keys | separate keys | values
        width = cfg.n_heads * cfg.d_head
        self.q_proj, self.k_proj = nn.Linear(cfg.d_model, width), nn.Linear(cfg.d_model, width)
        self.v_proj, self.o_proj = nn.Linear(cfg.d_model, width), nn.Linear(width, cfg.d_model)
        if self.kind == "cope" and self.gates_from == "separate keys":
            self.k_cope_proj = nn.Linear(cfg.d_model, width)
        self.mechanism = build_position_mechanism(self.kind, cfg, attention="cope")  # the registry's module
        if self.kind == "cope" and options.get("relative"):  # --pos-emb cope+rel: both biases
            self.mechanism.relative = RelativePositions(cfg)
        self.add_attention_hooks()  # shapes and meanings: repo_lens.model.hook_shapes

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.n_heads, self.d_head)

    def _gate_source(self, h: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """What the gates compare the queries with: keys, the separate cope keys (cached too) or values."""
        if self.gates_from == "values":
            return v
        if self.gates_from == "keys":
            return k
        source = self._heads(self.k_cope_proj(h)).transpose(1, 2)
        if cache is not None:
            state = cache.position_states[self.layer]
            source = source if "k_cope" not in state else torch.cat((state["k_cope"], source), dim=2)
            state["k_cope"] = source.detach()
        return source

    def _bias(self, h, q, k, v, cache, allowed) -> torch.Tensor | None:
        """The layer's logit bias; publishes its positions through hook_pos."""
        n_queries, n_keys = allowed.shape
        if self.kind == "nope":
            self.hook_pos(torch.zeros(q.shape[0], self.n_heads, n_queries, device=q.device))
            return None
        if self.kind == "rel":
            bias, positions = self.mechanism(q, None, allowed)
        else:
            scores = (q.float() @ self._gate_source(h, k, v, cache).float().transpose(-1, -2)) / self.d_head ** 0.5
            bias, positions = self.mechanism(q, scores, allowed)
            if hasattr(self.mechanism, "relative"):
                bias = bias + cast(RelativePositions, self.mechanism.relative)(q, None, allowed)[0]
        self.hook_pos(editable(self.hook_pos, positions))
        return bias

    def forward(self, h: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                shared: torch.Tensor | None = None) -> torch.Tensor:
        batch, pos, _ = h.shape
        q, k, v = (hook(self._heads(proj(h))) for hook, proj in
                   ((self.hook_q, self.q_proj), (self.hook_k, self.k_proj), (self.hook_v, self.v_proj)))
        q, k, v = self.hook_rot_q(q).transpose(1, 2), self.hook_rot_k(k).transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            k, v = cache.append(self.layer, k, v)
        allowed = causal_mask(pos, k.shape[2], h.device)
        z = attend(q, k, v, allowed, self._bias(h, q, k, v, cache, allowed), self.hook_pattern, self.hook_attn_scores)
        z = self.hook_z(z.transpose(1, 2))
        return project_heads(self.o_proj, z, self.hook_result)
