"""An independent float64 forward of the GRAPE authors' models, written from their source
(github model-architectures/GRAPE, model/llama-mha-*.py, rmsnorm.py, kv_shift_torch.py, fox.py; the
FoX kernel's own naive reference in forgetting_transformer/ops/forgetting_attention.py). It shares no
code with repo_lens: it reads their weight names from a state_dict and runs row by row.

Per block (pre-norm, RMSNorm eps 1e-5): x += c_proj(attention(ln_1(x))); x += c_proj(silu(c_fc1(h))·c_fc2(h))
with h = ln_2(x); logits = ln_f(x) @ wteᵀ (tied). The attention of each variant:

- k, v token shift: y_t ← α_t·y_{t−1} + (1 − α_t)·y_t per head, α = sigmoid(shift_proj(x)), y_{−1} = 0; a
  single token is left unshifted.
- rope / grape-m-nonctx / grape-m-ctx: rotate the halves (x1, x2) → (x1 cos a + x2 sin a, −x1 sin a + x2 cos a),
  a = position·θ_j with θ = base^(−2j/d), exp(log_freq/16) or exp(log_freq); position t, or (ctx)
  Φ_t = Σ_{τ<t} sigmoid((w·x_τ + b)/16); then RMSNorm q and k per head.
- the others normalise q and k first; alibi adds −m_h(i − j); key/query-gated GRAPE-A add
  −(i − j)·softplus(ω_h)·m_h·rate with rate = softplus(û·k_j/√d) and/or softplus(v̂·q_i/√d);
  GRAPE-AP adds Σ_{l=j+1}^{i} m_h·logsigmoid(p_i·R(l)p̂_l / d_p) (p̂ = p/rms(p) with fp32's eps, R(l)
  a rotation by l radians in every plane); FoX (head_dim = n_embd / n_head) adds Σ_{l=j+1}^{i} log f_l,
  f = sigmoid(fgate_proj(x)).
"""

from __future__ import annotations

import math

import torch

FLOAT32_EPS = 1.1920928955078125e-07  # F.rms_norm's default eps for their fp32 tensors


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-5) -> torch.Tensor:
    out = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return out if weight is None else out * weight


def _softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(torch.exp(-x.abs())) + x.clamp(min=0)


def _log_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return -_softplus(-x)


def alibi_slopes(n: int) -> list[float]:
    """ALiBi's slopes: 2^(−8h/n) for h = 1..n when n is a power of two; otherwise those of the largest
    power of two below n, then every other slope of twice that power."""
    if math.log2(n).is_integer():
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    below = 2 ** math.floor(math.log2(n))
    return alibi_slopes(below) + alibi_slopes(2 * below)[0::2][: n - below]


def _project(W: dict, prefix: str, h: torch.Tensor, n_head: int) -> torch.Tensor:
    """[T, H, D] projection, with the token shift when the checkpoint has one."""
    if prefix + ".weight" in W:
        y = h @ W[prefix + ".weight"].T
        return y.view(h.shape[0], n_head, -1)
    y = (h @ W[prefix + ".linear.weight"].T).view(h.shape[0], n_head, -1)
    if h.shape[0] == 1:
        return y
    alpha = torch.sigmoid(h @ W[prefix + ".shift_proj.weight"].T)  # [T, H]
    out = torch.empty_like(y)
    for t in range(h.shape[0]):
        previous = y[t - 1] if t > 0 else torch.zeros_like(y[0])
        out[t] = alpha[t][:, None] * previous + (1 - alpha[t][:, None]) * y[t]
    return out


def _rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x [T, D] rotated plane by plane, angles [T, D/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return torch.cat([x1 * torch.cos(angles) + x2 * torch.sin(angles), -x1 * torch.sin(angles) + x2 * torch.cos(angles)], -1)


def _softmax_attention(q, k, v, bias) -> torch.Tensor:
    """One head: q, k, v [T, D], bias [T, T] (None: 0) -> [T, D], causal, scale 1/√D."""
    T, D = q.shape
    out = torch.zeros_like(v)
    for i in range(T):
        logits = torch.stack([q[i] @ k[j] / math.sqrt(D) + (0.0 if bias is None else bias[i, j]) for j in range(i + 1)])
        weights = torch.exp(logits - logits.max())
        out[i] = (weights / weights.sum()) @ v[: i + 1]
    return out


def _frequencies(variant: str, W: dict, prefix: str, D: int, args: dict) -> torch.Tensor:
    if variant == "rope":
        return torch.tensor([args.get("rope_base", 10000.0) ** (-2.0 * j / D) for j in range(D // 2)], dtype=torch.float64)
    scale = args.get("grape_log_freq_scale", 16.0) if variant == "grape-m-nonctx" else 1.0
    return torch.exp(W[prefix + ".grape.log_freq"] / scale)


def _rotating(variant, W, prefix, h, q, k, args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rope / GRAPE-M: rotate then normalise; returns q, k [H, T, D] and the positions [T]."""
    T, H, D = q.shape
    positions = torch.arange(T, dtype=torch.float64)
    if variant == "grape-m-ctx":
        omega = torch.sigmoid((h @ W[prefix + ".omega_proj.weight"].T + W[prefix + ".omega_proj.bias"]) / 16.0)[:, 0]
        positions = torch.cumsum(omega, 0) - omega
    angles = positions[:, None] * _frequencies(variant, W, prefix, D, args)[None, :]
    q = torch.stack([_rotate(q[:, head], angles) for head in range(H)])
    k = torch.stack([_rotate(k[:, head], angles) for head in range(H)])
    return _rms(q, W[prefix + ".q_rms.weight"]), _rms(k, W[prefix + ".k_rms.weight"]), positions


def _gated_bias(variant: str, W: dict, prefix: str, q, k, head: int) -> torch.Tensor:
    """GRAPE-A: b(i, j) = −(i − j)·softplus(ω_h)·m_h·rate(i, j), [T, T] for one head (q, k [T, D])."""
    T, D = q.shape
    name = variant.removeprefix("grape-a-")
    gate = prefix + "." + name + "_bias"
    rate = torch.zeros(T, T, dtype=torch.float64)
    if name in ("keygated", "querykeygated"):
        u = W[gate + ".u"][head] / W[gate + ".u"][head].norm().clamp(min=1e-6)
        rate = rate + _softplus(k @ u / math.sqrt(D))[None, :]
    if name in ("querygated", "querykeygated"):
        v = W[gate + ".v"][head] / W[gate + ".v"][head].norm().clamp(min=1e-6)
        rate = rate + _softplus(q @ v / math.sqrt(D))[:, None]
    omega = _softplus(W[gate + ".omega"][head]) * alibi_slopes(W[gate + ".omega"].shape[0])[head]
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp(min=0).double()
    return -distance * omega * rate


def _path_psi(W: dict, prefix: str, h: torch.Tensor, head: int, n_head: int) -> torch.Tensor:
    """GRAPE-AP's ψ(i, l) [T, T] of one head."""
    p = (h @ W[prefix + ".c_p.weight"].T).view(h.shape[0], n_head, -1)[:, head]  # [T, d_p]
    d_p = p.shape[-1]
    p_hat = _rms(p, None, FLOAT32_EPS)
    angles = torch.arange(h.shape[0], dtype=torch.float64)[:, None].expand(-1, d_p // 2)
    p_rot = _rotate(p_hat, angles)
    return alibi_slopes(n_head)[head] * _log_sigmoid(p @ p_rot.T / d_p)


def _path_bias(psi: torch.Tensor) -> torch.Tensor:
    T = psi.shape[0]
    return torch.tensor([[float(psi[i, j + 1: i + 1].sum()) if j <= i else 0.0 for j in range(T)] for i in range(T)],
                        dtype=torch.float64)


def _additive(variant, W, prefix, h, q, k, n_head) -> tuple[list, torch.Tensor]:
    """(bias [T, T] per head, positions [H, T] as repo_lens shows them) of the non-rotating variants."""
    T = h.shape[0]
    slopes = torch.tensor(alibi_slopes(n_head), dtype=torch.float64)
    if variant == "alibi":
        distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()
        return [-distance * slopes[head] for head in range(n_head)], slopes[:, None] * torch.arange(T).double()
    if variant == "fox":
        log_f = _log_sigmoid(h @ W[prefix + ".core.fgate_proj.weight"].T + W[prefix + ".core.fgate_proj.bias"]).T
        biases = [torch.stack([torch.stack([log_f[head, j + 1: i + 1].sum() for j in range(T)]) for i in range(T)])
                  for head in range(n_head)]
        return biases, torch.cumsum(-log_f, dim=1)
    if variant == "grape-ap-v1":
        psis = [_path_psi(W, prefix, h, head, n_head) for head in range(n_head)]
        return [_path_bias(psi) for psi in psis], torch.stack([torch.cumsum(-psi[-1], 0) for psi in psis])
    biases = [_gated_bias(variant, W, prefix, q[head], k[head], head) for head in range(n_head)]
    return biases, torch.stack([bias[-1] - bias[-1, 0] for bias in biases])


def attention(variant: str, W: dict, prefix: str, h: torch.Tensor, args: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's attention output [T, C] and the positions [H, T] repo_lens is expected to show."""
    H = args["n_head"]
    core = prefix + ".core" if variant == "fox" else prefix
    names = ("q_proj", "k_proj", "v_proj") if variant == "fox" else ("c_q", "c_k", "c_v")
    q, k, v = (_project(W, f"{core}.{name}", h, H) for name in names)  # [T, H, D]
    if variant in ("rope", "grape-m-nonctx", "grape-m-ctx"):
        q, k, positions = _rotating(variant, W, prefix, h, q, k, args)
        positions, biases = positions[None].expand(H, -1), [None] * H
    else:
        norms = (core + ".q_norm.weight", core + ".k_norm.weight") if variant == "fox" else (
            prefix + ".q_rms.weight", prefix + ".k_rms.weight")
        q, k = _rms(q, W[norms[0]]).transpose(0, 1), _rms(k, W[norms[1]]).transpose(0, 1)
        biases, positions = _additive(variant, W, prefix, h, q, k, H)
    v = v.transpose(0, 1)
    heads = [_softmax_attention(q[head], k[head], v[head], biases[head]) for head in range(H)]
    out = torch.cat(heads, dim=-1)
    return out @ W[core + ".c_proj.weight"].T, positions


def grape_forward(state: dict[str, torch.Tensor], args: dict, variant: str, ids: list[int]):
    """(logits [T, vocab], positions per layer [H, T]) in float64, from their state_dict and model_args."""
    W = {name: tensor.double() for name, tensor in state.items()}
    x = W["transformer.wte.weight"][torch.tensor(ids)]
    positions = []
    for layer in range(args["n_layer"]):
        block = f"transformer.h.{layer}"
        out, shown = attention(variant, W, block + ".attn", _rms(x, W[block + ".ln_1.weight"]), args)
        positions.append(shown)
        x = x + out
        h = _rms(x, W[block + ".ln_2.weight"])
        gate, up = h @ W[block + ".mlp.c_fc1.weight"].T, h @ W[block + ".mlp.c_fc2.weight"].T
        x = x + (gate * torch.sigmoid(gate) * up) @ W[block + ".mlp.c_proj.weight"].T
    logits = _rms(x, W["ln_f.weight"]) @ W["transformer.wte.weight"].T
    return logits, positions
