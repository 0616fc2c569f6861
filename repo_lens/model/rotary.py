"""Rotary position encoding at real-valued, per-head positions.

RoPE normally rotates by an integer index; RePo (Eq. 7) rotates by a learned z. Everything
here takes positions of shape [batch, head, pos] (float) and computes angles in fp32.
The frequency schedules follow the published formulas: RoPE (Su et al.), linear position
interpolation, YaRN (Peng et al., 2023: NTK-by-parts ramp + attention temperature) and
Llama-3's smoothed wavelength scaling.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from repo_lens.errors import CheckpointError

SUPPORTED_ROPE_TYPES = ("default", "linear", "yarn", "llama3")


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(n_rotations: float, dim: int, base: float, max_pos: int) -> float:
    # dimension index whose wavelength completes `n_rotations` turns over `max_pos` tokens
    return dim * math.log(max_pos / (n_rotations * 2 * math.pi)) / (2 * math.log(base))


def rope_frequencies(
    head_dim: int,
    theta: float,
    rope_scaling: dict[str, Any] | None = None,
    max_position_embeddings: int = 2048,
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (fp32, [head_dim // 2]) and the attention scaling factor.

    >>> inv_freq, scale = rope_frequencies(8, 10000.0)
    >>> inv_freq.shape, scale
    (torch.Size([4]), 1.0)
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim
    base_inv_freq = 1.0 / (theta**exponents)
    rope_type = "default"
    if rope_scaling:
        rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise CheckpointError(
            f"unsupported rope scaling type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type == "default":
        return base_inv_freq.float(), 1.0
    assert rope_scaling is not None
    factor = float(rope_scaling["factor"])
    if rope_type == "linear":
        return (base_inv_freq / factor).float(), 1.0
    if rope_type == "llama3":
        low_freq_factor = float(rope_scaling["low_freq_factor"])
        high_freq_factor = float(rope_scaling["high_freq_factor"])
        original = float(rope_scaling["original_max_position_embeddings"])
        wavelength = 2 * math.pi / base_inv_freq
        smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * base_inv_freq / factor + smooth * base_inv_freq
        inv_freq = torch.where(wavelength > original / low_freq_factor, base_inv_freq / factor, base_inv_freq)
        medium = (wavelength <= original / low_freq_factor) & (wavelength >= original / high_freq_factor)
        inv_freq = torch.where(medium, smoothed, inv_freq)
        return inv_freq.float(), 1.0
    # YaRN
    original = rope_scaling.get("original_max_position_embeddings") or max_position_embeddings
    attention_factor = rope_scaling.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = rope_scaling.get("mscale"), rope_scaling.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = rope_scaling.get("beta_fast") or 32
    beta_slow = rope_scaling.get("beta_slow") or 1
    low = _yarn_correction_dim(beta_fast, head_dim, theta, original)
    high = _yarn_correction_dim(beta_slow, head_dim, theta, original)
    if rope_scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)
    extrapolated = base_inv_freq.float()
    interpolated = extrapolated / factor
    keep_extrapolated = 1 - ramp
    inv_freq = interpolated * (1 - keep_extrapolated) + extrapolated * keep_extrapolated
    return inv_freq, float(attention_factor)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotary_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles z·inv_freq, fp32, shape [batch, head, pos, head_dim] (NeoX layout)."""
    angles = positions.float().unsqueeze(-1) * inv_freq.to(positions.device, torch.float32)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos() * attention_scaling, angles.sin() * attention_scaling


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [batch, head, pos, head_dim] (NeoX rotate-half convention); result in x's dtype."""
    rotated = x.float() * cos + rotate_half(x.float()) * sin
    return rotated.to(x.dtype)
