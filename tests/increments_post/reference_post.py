"""An independent float64 forward of the learned-increments post's model, and small random checkpoints
written exactly as its training code writes them.

Written from the post's code (github brendanlong/learned-position-increments-experiment,
``experiments/selective_pe/model.py``, ``config.py``, ``training.py``); shares no code with repo_lens.

Forward (``SelectivePETransformer.forward``): x = E[ids] (no scale). Per layer, pre-norm RMSNorm (eps
``norm_eps``): x += wo(attn(attn_norm(x))); x += ffn(ffn_norm(x)) with SwiGLU w_down(silu(w_gate x) ⊙
w_up x) or GELU w_down(gelu(w_up x)), no biases; then final_norm and the tied output x @ Eᵀ.

Attention: q, k, v = wq x, wk x, wv x split into heads; RoPE pairs are ADJACENT channels (2i, 2i+1)
rotated by p·θ_i, θ_i = rope_theta^(−2i/d). Positions p: the index 0..T−1 (``rope``/``pope``), or the
INCLUSIVE running sum of δ (``selective_*``):

- shared δ = softplus(fc2(gelu(fc1(E[ids])))), computed once for every layer ([T] or [T, H] per head);
- per-layer δ_l = 10·sigmoid(fc2(gelu(fc1(RMSNorm_l(x_l))))), x_l the residual entering block l and RMSNorm_l
  the DeltaMLP's own (weight, eps = float32's machine epsilon, as ``nn.RMSNorm(dim)`` runs in fp32);
- a frozen table: δ = deltas[ids] ([V] or [V, H]).

PoPE replaces each pair by softplus(‖pair‖)·(cos pθ_i, sin pθ_i). Scores q·k/√d plus an optional decay
bias computed once from the embeddings: ALiBi −m_h (i − j) with m_h = (2^(−8/H))^(h+1), or the forget gate
A_i − A_j, A = cumsum(logsigmoid(fc2(gelu(fc1(E[ids]))))) per head. Causal softmax.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

FP32_EPS = torch.finfo(torch.float32).eps  # nn.RMSNorm(dim)'s eps in an fp32 forward


def post_config(**overrides) -> dict:
    """The ``model_config`` dict its training writes (``SelectivePEModelConfig.model_dump()``, computed
    fields included), tiny by default."""
    cfg = {"dim": 32, "n_heads": 4, "n_layers": 2, "intermediate_dim": 64, "vocab_size": 257, "max_seq_len": 64,
           "rope_theta": 10000.0, "norm_eps": 1e-5, "dropout": 0.0, "pos_encoding": "rope", "norm_type": "rmsnorm",
           "activation": "swiglu", "init_std": 0.02, "delta_hidden_dim": None, "per_layer_delta": False,
           "per_head_delta": False, "decay": "none"}
    cfg.update(overrides)
    cfg["head_dim"] = cfg["dim"] // cfg["n_heads"]
    cfg["effective_delta_hidden_dim"] = cfg["delta_hidden_dim"] or cfg["dim"] // 4
    return cfg


def state_dict_layout(cfg: dict, frozen: str | None = None) -> dict[str, tuple[int, ...]]:
    """name -> shape of its ``state_dict()`` (persistent entries only), in registration order.
    ``frozen``: None, "shared" ([V] table) or "per_head" ([V, H] table) after ``install_frozen_deltas``."""
    D, H, L, F, V = cfg["dim"], cfg["n_heads"], cfg["n_layers"], cfg["intermediate_dim"], cfg["vocab_size"]
    hidden, heads = cfg["effective_delta_hidden_dim"], (H if cfg.get("per_head_delta") else 1)
    sd: dict[str, tuple[int, ...]] = {"tok_emb.weight": (V, D)}
    for layer in range(L):
        p = f"layers.{layer}."
        sd[p + "attn_norm.weight"] = (D,)
        for name in ("wq", "wk", "wv"):
            sd[p + f"attn.{name}.weight"] = (D, D)
        sd[p + "attn.wo.weight"] = (D, D)
        sd[p + "ffn_norm.weight"] = (D,)
        mlp = ("w_gate", "w_up") if cfg["activation"] == "swiglu" else ("w_up",)
        for name in mlp:
            sd[p + f"ffn.{name}.weight"] = (F, D)
        sd[p + "ffn.w_down.weight"] = (D, F)
    sd["final_norm.weight"] = (D,)
    selective = cfg["pos_encoding"].startswith("selective")
    if selective and frozen is None:
        if cfg.get("per_layer_delta"):
            for layer in range(L):
                p = f"delta_mlps.{layer}."
                sd.update({p + "norm.weight": (D,), p + "fc1.weight": (hidden, D), p + "fc1.bias": (hidden,),
                           p + "fc2.weight": (heads, hidden), p + "fc2.bias": (heads,)})
        else:
            sd.update({"delta_mlp.fc1.weight": (hidden, D), "delta_mlp.fc1.bias": (hidden,),
                       "delta_mlp.fc2.weight": (heads, hidden), "delta_mlp.fc2.bias": (heads,)})
    if cfg.get("decay") == "learned":
        sd.update({"forget_mlp.fc1.weight": (hidden, D), "forget_mlp.fc1.bias": (hidden,),
                   "forget_mlp.fc2.weight": (H, hidden), "forget_mlp.fc2.bias": (H,)})
    if frozen is not None:
        sd["frozen_delta.deltas"] = (V,) if frozen == "shared" else (V, H)
    return sd


def random_weights(cfg: dict, seed: int, frozen: str | None = None) -> dict[str, torch.Tensor]:
    """Random float32 weights of the layout, perturbed well away from the post's initialisation so δ and the
    forget gates vary from token to token (norm weights around 1, δ around 1, gates well inside (0, 1))."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in state_dict_layout(cfg, frozen).items():
        noise = torch.randn(shape, generator=generator, dtype=torch.float64)
        if name.endswith("norm.weight"):
            value = 1.0 + 0.3 * noise
        elif name == "tok_emb.weight":
            value = noise
        elif name == "frozen_delta.deltas":
            value = 0.2 + torch.rand(shape, generator=generator, dtype=torch.float64) * 2.0
        elif name.endswith(".bias"):
            value = 0.5 * noise + (0.54 if name.startswith("delta_mlp.") else -2.2 if name.startswith("delta_mlps.")
                                   else 2.0 if name.startswith("forget_mlp") else 0.0)
        else:
            value = noise / shape[-1] ** 0.5 * (2.0 if "mlp" in name else 1.0)
        out[name] = value.float()
    return out


def write_post_checkpoint(directory: Path, cfg: dict, seed: int = 0, step: int = 100, frozen: str | None = None,
                          prefix: str = "", drop_fields: tuple[str, ...] = ()) -> tuple[Path, dict[str, torch.Tensor]]:
    """``step_<step>.pt`` in ``directory`` as ``save_model_checkpoint`` writes it: torch.save of {step,
    model_state_dict, model_config}. ``prefix`` (e.g. "_orig_mod.") prefixes every key; ``drop_fields`` leaves
    fields out of the config (older runs' configs lack per_layer_delta, per_head_delta and decay)."""
    weights = random_weights(cfg, seed, frozen)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{step}.pt"
    config = {key: value for key, value in cfg.items() if key not in drop_fields}
    torch.save({"step": step, "model_state_dict": {prefix + name: tensor for name, tensor in weights.items()},
                "model_config": config}, path)
    return path, weights


# --- the forward -----------------------------------------------------------------------------------------------

def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))


def _mlp(W: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    hidden = _gelu(x @ W[prefix + "fc1.weight"].T + W[prefix + "fc1.bias"])
    return hidden @ W[prefix + "fc2.weight"].T + W[prefix + "fc2.bias"]


def _per_head(delta: torch.Tensor, H: int) -> torch.Tensor:
    """[T] or [T, 1] or [T, H] -> [T, H]."""
    if delta.dim() == 1:
        delta = delta[:, None]
    return delta.expand(delta.shape[0], H)


def _encode(x: torch.Tensor, p: torch.Tensor, theta: float, pope: bool) -> torch.Tensor:
    """x [T, H, d], positions p [T, H] -> RoPE (or PoPE) on adjacent pairs (2i, 2i+1)."""
    T, H, d = x.shape
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = p[..., None] * inv  # [T, H, d/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2], x[..., 1::2]
    if pope:
        m = _softplus(torch.sqrt(a * a + b * b))
        ra, rb = m * cos, m * sin
    else:
        ra, rb = a * cos - b * sin, a * sin + b * cos
    return torch.stack((ra, rb), -1).reshape(T, H, d)


def post_forward(weights: dict[str, torch.Tensor], cfg: dict, ids: list[int]) -> dict[str, torch.Tensor]:
    """{"logits" [T, V], "positions" [L, H, T], "deltas" [L, H, T] (zeros where positions are the index),
    "decay" [H, T, T] or None}, all float64."""
    W = {name.removeprefix("_orig_mod."): tensor.double() for name, tensor in weights.items()}
    if cfg.get("norm_type", "rmsnorm") != "rmsnorm":
        raise ValueError("the reference runs RMSNorm models")
    D, H, L = cfg["dim"], cfg["n_heads"], cfg["n_layers"]
    d, eps, theta = D // H, cfg["norm_eps"], cfg["rope_theta"]
    T = len(ids)
    idx = torch.tensor(ids)
    encoding = cfg["pos_encoding"]
    selective, pope = encoding.startswith("selective"), encoding.endswith("pope")
    per_layer = cfg.get("per_layer_delta", False)
    x = W["tok_emb.weight"][idx]
    emb = x
    shared = None
    if selective and "frozen_delta.deltas" in W:
        shared = _per_head(W["frozen_delta.deltas"][idx], H)
    elif selective and not per_layer:
        shared = _per_head(_softplus(_mlp(W, "delta_mlp.", emb)), H)  # [T, 1] or [T, H] per head
    decay = None
    if cfg.get("decay", "none") == "alibi":
        ratio = 2.0 ** (-8.0 / H)
        slopes = torch.tensor([ratio ** (h + 1) for h in range(H)], dtype=torch.float64)
        dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp(min=0).double()
        decay = -slopes[:, None, None] * dist
    elif cfg.get("decay", "none") == "learned":
        la = torch.nn.functional.logsigmoid(_mlp(W, "forget_mlp.", emb))  # [T, H]
        A = torch.cumsum(la, 0).T  # [H, T]
        decay = A[:, :, None] - A[:, None, :]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    positions, deltas = [], []
    for layer in range(L):
        p = f"layers.{layer}."
        if not selective:
            delta = torch.zeros(T, H, dtype=torch.float64)
            pos = torch.arange(T, dtype=torch.float64)[:, None].expand(T, H)
        else:
            if shared is not None:
                delta = shared
            else:
                q = f"delta_mlps.{layer}."
                raw = _mlp(W, q, _rms(x, W[q + "norm.weight"], FP32_EPS))
                delta = _per_head(10.0 * torch.sigmoid(raw), H)
            pos = torch.cumsum(delta, 0)  # inclusive
        positions.append(pos.T)
        deltas.append(delta.T)
        h = _rms(x, W[p + "attn_norm.weight"], eps)
        q = _encode((h @ W[p + "attn.wq.weight"].T).view(T, H, d), pos, theta, pope)
        k = _encode((h @ W[p + "attn.wk.weight"].T).view(T, H, d), pos, theta, pope)
        v = (h @ W[p + "attn.wv.weight"].T).view(T, H, d)
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(d)
        if decay is not None:
            scores = scores + decay
        scores = scores.masked_fill(~causal, float("-inf"))
        z = torch.einsum("hij,jhd->ihd", torch.softmax(scores, -1), v).reshape(T, D)
        x = x + z @ W[p + "attn.wo.weight"].T
        h = _rms(x, W[p + "ffn_norm.weight"], eps)
        if cfg["activation"] == "swiglu":
            gate = h @ W[p + "ffn.w_gate.weight"].T
            inner = gate * torch.sigmoid(gate) * (h @ W[p + "ffn.w_up.weight"].T)
        else:
            inner = _gelu(h @ W[p + "ffn.w_up.weight"].T)
        x = x + inner @ W[p + "ffn.w_down.weight"].T
    x = _rms(x, W["final_norm.weight"], eps)
    return {"logits": x @ W["tok_emb.weight"].T, "positions": torch.stack(positions), "deltas": torch.stack(deltas),
            "decay": decay}
