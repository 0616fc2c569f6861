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


def _inv_freq(config, theta, d_head, T):
    """RoPE's θ^(−2i/d); linear scaling divides by the factor; dynamic NTK scaling (used beyond the
    original context of L tokens, with T the sequence length) raises the base to
    θ·(factor·T/L − (factor − 1))^(d/(d−2))."""
    scaling = config.get("rope_scaling") or {}
    kind, factor = scaling.get("rope_type", scaling.get("type")), scaling.get("factor")
    original = config["max_position_embeddings"]
    if kind == "dynamic" and T > original:
        theta = theta * (factor * T / original - (factor - 1)) ** (d_head / (d_head - 2))
    inv_freq = 1.0 / theta ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    return inv_freq / factor if kind == "linear" else inv_freq


def _learned_positions(W, prefix, h, mode, n_heads):
    """[T, H] positions of a selected layer under the authors' ``dynamic_pe_mode``; None: no rotation."""
    if mode == "swigluex_multihead":
        r = torch.nn.functional.silu(h @ W[prefix + "gate_map.weight"].T) * (h @ W[prefix + "content_map.weight"].T)  # Eq. 4
        return r @ W[prefix + "final_map.weight"].T  # Eq. 5: one position per head
    if mode == "multihead_continuous":
        return h @ W[prefix + "dynamic_map.weight"].T  # a linear map to one position per head
    if mode == "continuous":
        return (h @ W[prefix + "dynamic_map.weight"].T).expand(-1, n_heads)  # one position per token, every head
    if mode == "nope":
        return None
    raise ValueError(f"no reference for dynamic_pe_mode {mode!r}")


def reference_forward(weights: dict, config: dict, ids: list[int], repo_layers=None, mode="swigluex_multihead"):
    """Returns (logits [T, vocab], positions [L, H, T]) for one sequence. ``repo_layers``: the
    re-positioned layers (default: every layer from the misspelled ``dynmaic_pe_start_layer`` on);
    ``mode``: what they run, the authors' ``dynamic_pe_mode``. NoPE layers report position 0."""
    W = {name: tensor.double() for name, tensor in weights.items()}
    d_model, n_heads, n_layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    eps = config["rms_norm_eps"]
    theta = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0))
    if repo_layers is None:
        repo_layers = range(config["pe_config"]["dynmaic_pe_start_layer"], n_layers)
    d_head = d_model // n_heads
    T = len(ids)
    inv_freq = _inv_freq(config, theta, d_head, T)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    all_positions = []
    for layer in range(n_layers):
        p = f"model.layers.{layer}."
        h = x  # OLMo-2 is post-norm: attention (and f) read the raw residual stream
        z = _learned_positions(W, p + "self_attn.", h, mode, n_heads) if layer in repo_layers else (
            torch.arange(T, dtype=torch.float64)[:, None].expand(T, n_heads))
        all_positions.append(torch.zeros(n_heads, T, dtype=torch.float64) if z is None else z.T)
        q = _rms(h @ W[p + "self_attn.q_proj.weight"].T, W[p + "self_attn.q_norm.weight"], eps)
        k = _rms(h @ W[p + "self_attn.k_proj.weight"].T, W[p + "self_attn.k_norm.weight"], eps)
        v = h @ W[p + "self_attn.v_proj.weight"].T
        heads = []
        for head in range(n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)
            qh, kh = q[:, cols], k[:, cols]
            if z is not None:
                angle = z[:, head : head + 1] * inv_freq[None, :]  # g_theta(z): Eq. 7
                qh, kh = _rotate(qh, angle), _rotate(kh, angle)
            scores = (qh @ kh.T) / math.sqrt(d_head)
            scores = scores.masked_fill(~causal, float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v[:, cols])
        attn = torch.cat(heads, dim=-1) @ W[p + "self_attn.o_proj.weight"].T
        x = x + _rms(attn, W[p + "post_attention_layernorm.weight"], eps)
        mlp = (torch.nn.functional.silu(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        x = x + _rms(mlp, W[p + "post_feedforward_layernorm.weight"], eps)
    logits = _rms(x, W["model.norm.weight"], eps) @ W["lm_head.weight"].T
    return logits, torch.stack(all_positions)
