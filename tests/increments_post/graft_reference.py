"""The learned-increments post's graft written as its training saves it, and its δ and positions computed
independently of repo_lens (float64, from the file's tensors and the base's embedding matrix).

Written from the post's code (github brendanlong/learned-position-increments-experiment,
``experiments/delta_graft/model.py``, ``train.py``, ``config.py``; ``experiments/selective_pe/model.py``'s
DeltaMLP with ``bounded=False, n_heads=1``); shares no code with repo_lens:

- ``save_delta_checkpoint`` writes ``torch.save({"step", "delta_mlp_state_dict", "model_config",
  "final_metrics"})``: the DeltaMLP's state_dict (fc1 [d/4, d] + bias, fc2 [1, d/4] + bias; no norm) and
  ``DeltaGraftConfig.model_dump()`` (its tuple of LoRA targets stays a tuple);
- δ = softplus(fc2(gelu(fc1(e)))) of the base's input embeddings e = E[ids] (``get_input_embeddings()``: no scale),
  in fp32; positions = cumsum(δ) − δ (exclusive: token 0 at 0), passed to the base as ``position_ids``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path

import torch

POST_BIAS = 0.5413  # DeltaMLP's fc2 bias at init (softplus(0.5413) ≈ 1)


def graft_config(**overrides) -> dict:
    """``DeltaGraftConfig().model_dump()`` with ``overrides``."""
    config = {"base_model": "HuggingFaceTB/SmolLM2-1.7B", "delta_hidden_dim": None, "delta_enabled": True,
              "adapt": "lora", "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0,
              "lora_target_modules": ("q_proj", "k_proj", "v_proj", "o_proj")}
    config.update(overrides)
    return config


def graft_state(d_model: int, hidden: int | None = None, seed: int = 0, scale: float = 0.3) -> OrderedDict:
    """A trained-looking DeltaMLP state_dict: random fc1 and fc2 (fc2 no longer zero), fc2's bias near 0.5413."""
    hidden = hidden or d_model // 4
    generator = torch.Generator().manual_seed(seed)
    return OrderedDict([
        ("fc1.weight", torch.randn(hidden, d_model, generator=generator) * scale),
        ("fc1.bias", torch.randn(hidden, generator=generator) * scale),
        ("fc2.weight", torch.randn(1, hidden, generator=generator) * scale),
        ("fc2.bias", torch.tensor([POST_BIAS]) + 0.05 * torch.randn(1, generator=generator)),
    ])


def write_graft(path: Path, state: dict, config: dict | None = None, **entries) -> Path:
    """``delta_mlp.pt`` as ``save_delta_checkpoint`` writes it (``entries`` replace or add top-level entries)."""
    checkpoint = {"step": 2000, "delta_mlp_state_dict": state, "model_config": config or graft_config(),
                  "final_metrics": {"val/loss": 2.2683, "val/ppl": 9.666, "val/loss_vs_base": 0.0007}}
    checkpoint.update(entries)
    torch.save(checkpoint, path)
    return path


def reference_deltas(state: dict, embeddings: torch.Tensor) -> torch.Tensor:
    """δ [vocab] float64 of every row of ``embeddings`` [vocab, d]: softplus(fc2(gelu(fc1(e)))), exact GELU."""
    e = embeddings.double()
    pre = e @ state["fc1.weight"].double().T + state["fc1.bias"].double()
    hidden = 0.5 * pre * (1.0 + torch.erf(pre / math.sqrt(2.0)))
    out = hidden @ state["fc2.weight"].double().T + state["fc2.bias"].double()
    return torch.log1p(torch.exp(out[:, 0]))


def exclusive_positions(deltas: torch.Tensor) -> torch.Tensor:
    """position_t = Σ_{s<t} δ_s along the last axis (the first token at 0)."""
    return torch.cumsum(deltas, dim=-1) - deltas
