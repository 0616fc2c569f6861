"""An independent float64 forward of the FoX authors' package (github zhixuan-lin/forgetting-transformer,
src/forgetting_transformer/model/forgetting_transformer/modeling_forgetting_transformer.py with the
references their kernels are tested against: rms_norm_ref, group_norm_ref, group_norm_gated_ref,
apply_rotary_emb_torch, token_shift's and forgetting_attention's test formulas). Shares no code with
repo_lens; runs row by row.

Block: h = x + o_proj(attn(RMSNorm(x))); x = h + down(act(gate)·up) of RMSNorm(h) (gate, up = the two halves
of mlp.gate_proj, act = silu or sigmoid); logits = RMSNorm(x) @ lm_headᵀ (or the embeddings when tied).
Attention: q, k, v (k/v token-shifted: y_t ← α_t y_{t−1} + (1 − α_t) y_t, a lone token gives (1 − α) y);
qk RMS-normalised per head (weight [H·D] or shared [D], eps 1e-5); rotated by +t·θ (x1 cos − x2 sin,
x2 cos + x1 sin) with use_rope; logit_ij = q_i·k_j/√D + Σ_{l=j+1}^{i} log f_l; output RMS-normalised per
head (eps norm_eps) and/or gated by sigmoid/silu(ogate_proj(x)).
"""

from __future__ import annotations

import torch

from .reference_grape import _log_sigmoid, _rms, _softmax_attention


def _shift(W: dict, prefix: str, h: torch.Tensor, n_head: int) -> torch.Tensor:
    if prefix + ".weight" in W:
        return (h @ W[prefix + ".weight"].T).view(h.shape[0], n_head, -1)
    y = (h @ W[prefix + ".linear.weight"].T).view(h.shape[0], n_head, -1)
    alpha = torch.sigmoid(h @ W[prefix + ".shift_proj.weight"].T)
    previous = torch.cat([torch.zeros_like(y[:1]), y[:-1]])
    return alpha[..., None] * previous + (1 - alpha[..., None]) * y


def _head_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [T, H, D] normalised over D; weight [D] or [H·D]."""
    return _rms(x, weight.view(-1, x.shape[-1]) if weight.numel() != x.shape[-1] else weight, eps)


def _log_forget(W: dict, prefix: str, h: torch.Tensor, cfg: dict) -> torch.Tensor:
    """log f [H, T]."""
    T, H = h.shape[0], cfg["num_heads"]
    if cfg["fgate_type"] == "none":
        return torch.zeros(H, T, dtype=torch.float64)
    logit = h @ W[prefix + "fgate_proj.weight"].T + W[prefix + "fgate_proj.bias"] if cfg["fgate_type"] == "full" \
        else W[prefix + "fgate_bias"].expand(T, H)
    return _log_sigmoid(logit).T


def _rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """x [T, H, D] rotated by +t·θ_j, θ_j = base^(−2j/D)."""
    T, _, D = x.shape
    angle = torch.arange(T, dtype=torch.float64)[:, None] * torch.tensor([base ** (-2 * j / D) for j in range(D // 2)],
                                                                       dtype=torch.float64)[None]
    cos, sin = torch.cos(angle)[:, None], torch.sin(angle)[:, None]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(W: dict, prefix: str, h: torch.Tensor, cfg: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's output [T, C] and its positions Σ_{s≤t} −log f_s [H, T]."""
    T, H = h.shape[0], cfg["num_heads"]
    q = (h @ W[prefix + "q_proj.weight"].T).view(T, H, -1)
    k, v = _shift(W, prefix + "k_proj", h, H), _shift(W, prefix + "v_proj", h, H)
    if cfg["qk_norm"]:
        q, k = _head_norm(q, W[prefix + "q_norm.weight"], 1e-5), _head_norm(k, W[prefix + "k_norm.weight"], 1e-5)
    if cfg["use_rope"]:
        q, k = _rope(q, cfg["rope_base"]), _rope(k, cfg["rope_base"])
    log_f = _log_forget(W, prefix, h, cfg)
    biases = [torch.stack([torch.stack([log_f[head, j + 1: i + 1].sum() for j in range(T)]) for i in range(T)])
              for head in range(H)]
    o = torch.stack([_softmax_attention(q[:, head], k[:, head], v[:, head], biases[head]) for head in range(H)], 1)
    if cfg["use_output_norm"]:
        o = _head_norm(o, W[prefix + "output_norm.weight"], cfg["norm_eps"])
    o = o.reshape(T, -1)
    if cfg["use_output_gate"]:
        gate = h @ W[prefix + "ogate_proj.weight"].T
        o = o * (gate * torch.sigmoid(gate) if cfg["ogate_act"] == "silu" else torch.sigmoid(gate))
    return o @ W[prefix + "o_proj.weight"].T, torch.cumsum(-log_f, 1)


def fox_forward(state: dict[str, torch.Tensor], cfg: dict, ids: list[int]):
    """(logits [T, vocab], positions per layer [H, T]) in float64."""
    W = {name: tensor.double() for name, tensor in state.items()}
    eps = cfg["norm_eps"]
    x = W["model.embeddings.weight"][torch.tensor(ids)]
    positions = []
    for layer in range(cfg["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        out, shown = attention(W, prefix + "attn.", _rms(x, W[prefix + "attn_norm.weight"], eps), cfg)
        x = x + out
        positions.append(shown)
        h = _rms(x, W[prefix + "mlp_norm.weight"], eps)
        gate, up = (h @ W[prefix + "mlp.gate_proj.weight"].T).chunk(2, -1)
        act = gate * torch.sigmoid(gate) if cfg["hidden_act"] == "swish" else torch.sigmoid(gate)
        x = x + (act * up) @ W[prefix + "mlp.down_proj.weight"].T
    head = W.get("lm_head.weight", W["model.embeddings.weight"])
    return _rms(x, W["model.norm.weight"], eps) @ head.T, positions
