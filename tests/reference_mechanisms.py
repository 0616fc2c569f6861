"""Independent float64 references for the learned / contextual position mechanisms, written from
their sources' equations with explicit loops over (query, key) pairs. They share no code with
repo_lens: they take q, k, v (read from the model's hooks) and raw weight tensors.

- learned increments (seeds/002): δ = softplus(W2 gelu(W1 e + b1) + b2) (shared) or
  max_delta · sigmoid(...) (per layer); position_t = Σ_{s≤t} δ_s.
- GRAPE-M content phase (seeds/003): ω = softplus(W h + b), phase_t = Σ_{s<t} ω_s.
- FoX: logit_ij = q_i·k_j/√d + Σ_{l=j+1}^{i} log f_l, f = sigmoid(w·h + b).
- CoPE (seeds/004 Eq. 3–9): g_ij = sigmoid(q_i·k_j/√d), p_ij = min(Σ_{t=j}^{i} g_it, p_max),
  logit_ij = q_i·k_j/√d + (p − ⌊p⌋) q_i·e[⌈p⌉] + (1 − p + ⌊p⌋) q_i·e[⌊p⌋].
- GRAPE-AP: logit_tj = q_t·k_j/√d + Σ_{l=j+1}^{t} log sigmoid(q_t·k_l/√d + b_h).
"""

from __future__ import annotations

import math

import torch


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _softplus(x):
    return torch.log1p(torch.exp(x))


def delta_mlp(h: torch.Tensor, fc_in_w, fc_in_b, fc_out_w, fc_out_b) -> torch.Tensor:
    """[T, d] -> [T] pre-activation of seeds/002's DeltaMLP (exact erf GELU)."""
    h, fc_in_w, fc_in_b, fc_out_w, fc_out_b = (t.double() for t in (h, fc_in_w, fc_in_b, fc_out_w, fc_out_b))
    hidden = h @ fc_in_w.T + fc_in_b
    hidden = 0.5 * hidden * (1.0 + torch.erf(hidden / math.sqrt(2.0)))
    return (hidden @ fc_out_w.T + fc_out_b)[:, 0]


def shared_increments(embeddings, weights) -> torch.Tensor:
    return _softplus(delta_mlp(embeddings, *weights))


def bounded_increments(h, weights, max_delta: float) -> torch.Tensor:
    return max_delta * torch.sigmoid(delta_mlp(h, *weights))


def running_sum(delta: torch.Tensor, exclusive: bool = False) -> torch.Tensor:
    out, total = torch.zeros_like(delta), 0.0
    for t in range(delta.shape[-1]):
        if not exclusive:
            total = total + delta[..., t]
        out[..., t] = total
        if exclusive:
            total = total + delta[..., t]
    return out


def content_phase(h, weight, bias) -> torch.Tensor:
    """[T, d] -> [H, T] exclusive running sum of ω = softplus(W h + b)."""
    omega = _softplus(h.double() @ weight.double().T + bias.double()).T
    return running_sum(omega, exclusive=True)


def _softmax_rows(logits: list[list[float]]) -> list[list[float]]:
    rows = []
    for row in logits:
        top = max(row)
        exps = [math.exp(value - top) for value in row]
        total = sum(exps)
        rows.append([value / total for value in exps])
    return rows


def pattern(q, k, bias_fn) -> torch.Tensor:
    """[T, T] causal attention probabilities of one head; bias_fn(i, j, scores_i) -> float."""
    q, k = q.double(), k.double()
    T, d = q.shape
    scores = (q @ k.T / math.sqrt(d)).tolist()
    logits = [[scores[i][j] + bias_fn(i, j, scores[i]) for j in range(i + 1)] for i in range(T)]
    probs = _softmax_rows(logits)
    out = torch.zeros(T, T, dtype=torch.float64)
    for i, row in enumerate(probs):
        out[i, : i + 1] = torch.tensor(row, dtype=torch.float64)
    return out


def fox_bias(log_forget: list[float]):
    return lambda i, j, scores: sum(log_forget[l] for l in range(j + 1, i + 1))


def cope_bias(q, embeddings, max_position: int, gates_override: float | None = None):
    """embeddings [d_head, p_max + 1] (column p is e[p])."""
    q_dot_e = (q.double() @ embeddings.double()).tolist()

    def bias(i, j, scores):
        gate = (lambda t: gates_override) if gates_override is not None else (lambda t: _sigmoid(scores[t]))
        p = min(sum(gate(t) for t in range(j, i + 1)), float(max_position))
        low, high = math.floor(p), math.ceil(p)
        return (p - low) * q_dot_e[i][high] + (1.0 - p + low) * q_dot_e[i][low]

    return bias


def grape_ap_bias(potential_bias: float):
    def bias(i, j, scores):
        return sum(math.log(_sigmoid(scores[l] + potential_bias)) for l in range(j + 1, i + 1))

    return bias
