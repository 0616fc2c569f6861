"""An independent float64 forward of the CoPE authors' simple decoder, written from their source
(github facebookresearch/RAM, projects/cope: src/models/simple_transformer.py, transformer.py,
relative_position.py, src/cope/context_position.py). Shares no code with repo_lens; runs row by row.

x = E[ids] (+ abs[:T]); per layer (LayerNorm eps 1e-5; pre-norm x + f(LN(x)) or post-norm LN(x + f(x))):
attention with biased projections, then fc2(relu(fc1(·))); a final LayerNorm when pre-norm; log_softmax of
x @ out_modᵀ. Per head, query i, key j ≤ i, d = head_dim:

- CoPE layer: gate logits q_i·g_j (g = k, the cope keys or the values), gates σ(·/√d); p_ij = Σ_{t=j}^{i}
  gate_it clamped to npos − 1; pos_ij = (p − ⌊p⌋)·q_i·e[⌈p⌉] + (1 − p + ⌊p⌋)·q_i·e[⌊p⌋];
  logit = (q_i·k_j [+ rel] + pos)/√d, or (q_i·k_j [+ rel])/√d + pos with --cope-nodiv.
- relative: rel_ij = q_i·R[M − 1 − (i − j)] (0 beyond M − 1, R[0] with --rel-pos-extend); logit (q·k + rel)/√d.
- otherwise q·k/√d.
"""

from __future__ import annotations

import math

import torch


def _layer_norm(x: torch.Tensor, W: dict, prefix: str) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * W[prefix + ".weight"] + W[prefix + ".bias"]


def _linear(x: torch.Tensor, W: dict, prefix: str) -> torch.Tensor:
    return x @ W[prefix + ".weight"].T + W[prefix + ".bias"]


def _relative(q_i: torch.Tensor, R: torch.Tensor, distance: int, extend: bool) -> float:
    index = R.shape[1] - 1 - distance
    if index < 0:
        return float(q_i @ R[:, 0]) if extend else 0.0
    return float(q_i @ R[:, index])


def _cope_position_logit(q_i: torch.Tensor, gates: list[float], j: int, E: torch.Tensor) -> tuple[float, float]:
    """(the interpolated position logit of key j, p_ij) for query i with the gates of keys 0..i."""
    p = min(sum(gates[j:]), E.shape[1] - 1)
    low, high = math.floor(p), math.ceil(p)
    return (p - low) * float(q_i @ E[:, high]) + (1 - (p - low)) * float(q_i @ E[:, low]), p


def _head(q, k, v, g, opts: dict, E, R) -> tuple[torch.Tensor, list[float]]:
    """One head's output [T, d] and the last query's gates (CoPE) for positions."""
    T, d = q.shape
    out, last_gates = torch.zeros_like(v), []
    for i in range(T):
        gates = [1 / (1 + math.exp(-float(q[i] @ g[j]) / math.sqrt(d))) for j in range(i + 1)] if E is not None else []
        logits = []
        for j in range(i + 1):
            attn = float(q[i] @ k[j]) + (0.0 if R is None else _relative(q[i], R, i - j, opts["rel_pos_extend"]))
            pos = _cope_position_logit(q[i], gates, j, E)[0] if E is not None else 0.0
            logits.append(attn / math.sqrt(d) + pos if opts["cope_nodiv"] else (attn + pos) / math.sqrt(d))
        weights = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
        out[i] = weights @ v[: i + 1]
        last_gates = gates
    return out, last_gates


def _attention(x: torch.Tensor, W: dict, prefix: str, opts: dict, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention output [T, C] and the positions [H, T] repo_lens should show for the layer."""
    T, H, d = x.shape[0], opts["nheads"], opts["head_dim"]
    split = lambda name: _linear(x, W, f"{prefix}.{name}").view(T, H, d).transpose(0, 1)  # noqa: E731
    q, k, v = split("proj_query"), split("proj_key"), split("proj_val")
    cope = opts["pos_emb"] in ("cope", "cope+rel") and (layer + 1) % opts["cope_layers"] == 0
    g = (v if opts["cope_val_gates"] else split("proj_key_cope") if opts["cope_sep_key"] else k) if cope else None
    E = W[prefix + ".attn.pos_emb"][0] if cope else None
    R = W[prefix + ".attn.rel_pos_emb.emb"][0] if prefix + ".attn.rel_pos_emb.emb" in W else None
    heads, positions = [], []
    for head in range(H):
        out, gates = _head(q[head], k[head], v[head], None if g is None else g[head], opts, E, R)
        heads.append(out)
        positions.append(torch.tensor(gates, dtype=torch.float64).cumsum(0) if cope
                         else torch.arange(T, dtype=torch.float64) * (R is not None))
    return _linear(torch.cat(heads, -1), W, prefix + ".proj_out"), torch.stack(positions)


def cope_forward(state: dict[str, torch.Tensor], opts: dict, ids: list[int]):
    """(log-probs [T, vocab], positions per layer [H, T]) in float64."""
    W = {name.removeprefix("module."): tensor.double() for name, tensor in state.items()}
    x = W["embed_toks.weight"][torch.tensor(ids)]
    if "abs_pos_emb" in W:
        x = x + W["abs_pos_emb"][0, : len(ids)]
    positions = []
    for layer in range(opts["nlayers"]):
        prefix = f"core.layers.{layer}"
        post = opts["post_norm"]
        out, shown = _attention(x if post else _layer_norm(x, W, prefix + ".attn_norm"), W, prefix + ".attn", opts, layer)
        positions.append(shown)
        x = _layer_norm(x + out, W, prefix + ".attn_norm") if post else x + out
        h = x if post else _layer_norm(x, W, prefix + ".ff_norm")
        out = _linear(torch.relu(_linear(h, W, prefix + ".ff.fc1")), W, prefix + ".ff.fc2")
        x = _layer_norm(x + out, W, prefix + ".ff_norm") if post else x + out
    if not opts["post_norm"]:
        x = _layer_norm(x, W, "out_norm")
    return torch.log_softmax(x @ W["out_mod.weight"].T, -1), positions
