"""Rotary position encoding at real-valued, per-head positions.

RoPE normally rotates by an integer index; RePo (Eq. 7) rotates by a learned z. Everything
here takes positions of shape [batch, head, pos] (float) and computes angles in fp32.
The frequency schedules follow the published formulas: RoPE (Su et al.), linear position
interpolation, dynamic NTK scaling, YaRN (Peng et al., 2023: NTK-by-parts ramp + attention
temperature) and Llama-3's smoothed wavelength scaling.

Inverse frequencies are computed the way transformers' rope initialisers compute them, which
is what the RePo authors' code runs: in float32, ``1 / theta ** (arange(0, d, 2) / d)`` with the
exponent and the power in float32 (not float64 rounded once), and each scaling rule applied to
those float32 values in transformers' order of operations. The result equals transformers'
``inv_freq`` bit for bit, so checkpoints match their forward to float32 rounding of the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch

from repo_lens.errors import CheckpointError

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_correction_dim(n_rotations: float, dim: int, base: float, max_pos: int) -> float:
    # dimension index whose wavelength completes `n_rotations` turns over `max_pos` tokens
    return dim * math.log(max_pos / (n_rotations * 2 * math.pi)) / (2 * math.log(base))


def _exponents(head_dim: int) -> torch.Tensor:
    """2i/d for i < d/2, in float32 (exact: small integers over a power of two or a small d)."""
    return torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim


def rope_type_of(rope_scaling: dict[str, Any] | None) -> str:
    """The rope type of an HF scaling dict (``rope_type``, or the older ``type``).

    >>> rope_type_of(None), rope_type_of({"type": "dynamic", "factor": 2.0})
    ('default', 'dynamic')
    """
    if not rope_scaling:
        return "default"
    return rope_scaling.get("rope_type", rope_scaling.get("type", "default"))


def rope_frequencies(
    head_dim: int,
    theta: float,
    rope_scaling: dict[str, Any] | None = None,
    max_position_embeddings: int = 2048,
    seq_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (fp32, [head_dim // 2]) and the attention scaling factor.

    ``seq_len`` matters only for dynamic NTK scaling: the number of tokens the forward covers
    (max integer position id + 1, KV cache included); at or below ``max_position_embeddings``
    the frequencies are the unscaled ones.

    >>> inv_freq, scale = rope_frequencies(8, 10000.0)
    >>> inv_freq.shape, scale
    (torch.Size([4]), 1.0)
    >>> dynamic = {"rope_type": "dynamic", "factor": 2.0}
    >>> torch.equal(rope_frequencies(8, 10000.0, dynamic, 128, seq_len=100)[0], inv_freq)
    True
    >>> bool((rope_frequencies(8, 10000.0, dynamic, 128, seq_len=300)[0] < inv_freq)[1:].all())
    True
    """
    rope_type = rope_type_of(rope_scaling)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise CheckpointError(
            f"unsupported rope scaling type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type == "default":
        return 1.0 / (theta ** _exponents(head_dim)), 1.0
    assert rope_scaling is not None
    factor = cast(float, rope_scaling.get("factor"))  # every scaled rope type has one
    if rope_type == "linear":
        return 1.0 / (theta ** _exponents(head_dim)) / float(factor), 1.0
    if rope_type == "dynamic":
        if seq_len is not None and seq_len > max_position_embeddings:
            # transformers computes this base from a tensor sequence length, i.e. in float32
            length = torch.tensor(seq_len, dtype=torch.int64)
            base = theta * ((factor * length / max_position_embeddings) - (factor - 1)) ** (head_dim / (head_dim - 2))
        else:
            base = theta * ((factor * max_position_embeddings / max_position_embeddings) - (factor - 1)) ** (
                head_dim / (head_dim - 2))
        return 1.0 / (base ** _exponents(head_dim)), 1.0
    if rope_type == "llama3":
        return _llama3_frequencies(head_dim, theta, rope_scaling), 1.0
    return _yarn_frequencies(head_dim, theta, rope_scaling, max_position_embeddings)


def _llama3_frequencies(head_dim: int, theta: float, rope_scaling: dict[str, Any]) -> torch.Tensor:
    factor = rope_scaling["factor"]
    low_freq_factor, high_freq_factor = rope_scaling["low_freq_factor"], rope_scaling["high_freq_factor"]
    original = rope_scaling["original_max_position_embeddings"]
    inv_freq = 1.0 / (theta ** _exponents(head_dim))
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > original / low_freq_factor, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelength < original / high_freq_factor) * ~(wavelength > original / low_freq_factor)
    return torch.where(medium, smoothed, scaled)


def _yarn_frequencies(head_dim: int, theta: float, rope_scaling: dict[str, Any],
                      max_position_embeddings: int) -> tuple[torch.Tensor, float]:
    original = rope_scaling.get("original_max_position_embeddings") or max_position_embeddings
    factor = rope_scaling.get("factor")
    if factor is None:
        factor = max_position_embeddings / original
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
    powers = theta ** _exponents(head_dim)
    extrapolated, interpolated = 1.0 / powers, 1.0 / (factor * powers)
    keep_extrapolated = 1 - ramp
    inv_freq = interpolated * (1 - keep_extrapolated) + extrapolated * keep_extrapolated
    return inv_freq, float(attention_factor)


@dataclass(frozen=True)
class RopeSettings:
    """A layer's rope settings, for frequencies that depend on the sequence length (dynamic NTK).

    Dynamic scaling follows transformers (and so the RePo authors' code): the length is the
    largest integer position id + 1 of the forward — the number of tokens including any KV
    cache — never the learned positions, which rotate by the same frequencies as the integer
    ones. Unlike transformers' rotary module, nothing is remembered between calls: transformers
    keeps the frequencies of the longest sequence seen until a call falls back below the
    original context, so a shorter call above it reuses them; repo_lens recomputes them per
    forward, which agrees with transformers on a fresh model and on growing KV-cache decoding.

    >>> settings = RopeSettings(8, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, 128)
    >>> default = rope_frequencies(8, 10000.0)[0]
    >>> [torch.equal(settings.inv_freq_at(n_tokens, default), default) for n_tokens in (128, 129)]
    [True, False]
    """

    head_dim: int
    theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int

    def inv_freq_at(self, n_tokens: int, inv_freq: torch.Tensor) -> torch.Tensor:
        """The inverse frequencies for a forward over ``n_tokens`` tokens (``inv_freq`` unless they depend on it)."""
        if rope_type_of(self.rope_scaling) != "dynamic" or n_tokens <= self.max_position_embeddings:
            return inv_freq
        scaled, _ = rope_frequencies(self.head_dim, self.theta, self.rope_scaling, self.max_position_embeddings,
                                     seq_len=n_tokens)
        return scaled.to(inv_freq.device)
