"""An independent reference forward of a RePo-OLMo2 checkpoint, written from the RePo paper
(Eq. 4–7) and the published layout in DESIGN.md, with plain float64 tensor algebra on the raw
HF-named weights. It shares no code with repo_lens."""

from __future__ import annotations

import math

import torch


def _rms(x, weight, eps):
    return weight * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def _rotate(x, angle):
    # NeoX "rotate half": pair dimension i with i + d/2
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    cos, sin = torch.cos(angle), torch.sin(angle)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def reference_forward(weights: dict, config: dict, ids: list[int]):
    """Returns (logits [T, vocab], positions [L, H, T]) for one sequence."""
    W = {name: tensor.double() for name, tensor in weights.items()}
    d_model, n_heads, n_layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    eps = config["rms_norm_eps"]
    theta = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0))
    pe = config["pe_config"]
    start = pe["dynmaic_pe_start_layer"]
    d_head = d_model // n_heads
    inv_freq = 1.0 / theta ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    T = len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    all_positions = []
    for layer in range(n_layers):
        p = f"model.layers.{layer}."
        h = x  # OLMo-2 is post-norm: attention (and f) read the raw residual stream
        if layer >= start:
            r = torch.nn.functional.silu(h @ W[p + "self_attn.gate_map.weight"].T) * (h @ W[p + "self_attn.content_map.weight"].T)  # Eq. 4
            z = r @ W[p + "self_attn.final_map.weight"].T  # Eq. 5: one position per head, [T, H]
        else:
            z = torch.arange(T, dtype=torch.float64)[:, None].expand(T, n_heads)
        all_positions.append(z.T)
        q = _rms(h @ W[p + "self_attn.q_proj.weight"].T, W[p + "self_attn.q_norm.weight"], eps)
        k = _rms(h @ W[p + "self_attn.k_proj.weight"].T, W[p + "self_attn.k_norm.weight"], eps)
        v = h @ W[p + "self_attn.v_proj.weight"].T
        heads = []
        for head in range(n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)
            angle = z[:, head : head + 1] * inv_freq[None, :]  # g_theta(z): Eq. 7
            qh, kh = _rotate(q[:, cols], angle), _rotate(k[:, cols], angle)
            scores = (qh @ kh.T) / math.sqrt(d_head)
            scores = scores.masked_fill(~causal, float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v[:, cols])
        attn = torch.cat(heads, dim=-1) @ W[p + "self_attn.o_proj.weight"].T
        x = x + _rms(attn, W[p + "post_attention_layernorm.weight"], eps)
        mlp = (torch.nn.functional.silu(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        x = x + _rms(mlp, W[p + "post_feedforward_layernorm.weight"], eps)
    logits = _rms(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T
    return logits, torch.stack(all_positions)
