"""What an authors' attention layer does besides its position mechanism, read from
``ModelConfig.extra["authors"]`` (the loaders fill it from the checkpoint's own config)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from repo_lens.errors import CheckpointError

NORMS = ("none", "head", "group")
OUTPUT_GATES = ("none", "sigmoid", "silu")


@dataclass(frozen=True)
class AttentionOptions:
    """qk_norm: "none", "head" (one RMSNorm weight [d_head] for every head: GRAPE's q_rms/k_rms) or "group"
    (a weight [head·d_head]: FoX's GroupNorm); qk_norm_before_rotation: FoX normalises then rotates,
    GRAPE's rotating variants rotate then normalise; k_shift/v_shift: the data-dependent token shift;
    unshifted_single_token: GRAPE leaves a lone token unshifted; rope: rotate q and k by the token index
    at ``rope_base`` in a layer whose mechanism does not rotate (FoX's use_rope); output_norm (+eps):
    per-head RMSNorm of the attention output (GRAPE's subln, FoX's output_norm); output_gate: FoX's
    ogate (sigmoid or silu of ogate_proj(x), times the output, before the output projection);
    learned_frequencies (+shared, scale): GRAPE-M's θ = exp(log_freq / scale); neox_rotation: rotate by
    +angle (x1·cos − x2·sin, FoX's package) instead of GRAPE's −angle; mlp_act: "swish" or "sigmoid" (FoX's
    GLU variant).

    >>> AttentionOptions.from_extra({"authors": {"qk_norm": "head", "k_shift": True}}).k_shift
    True
    """

    qk_norm: str = "head"
    qk_norm_eps: float = 1e-5
    qk_norm_before_rotation: bool = False
    k_shift: bool = False
    v_shift: bool = False
    unshifted_single_token: bool = True
    rope: bool = False
    rope_base: float = 10000.0
    output_norm: str = "none"
    output_norm_eps: float = 1e-5
    output_gate: str = "none"
    learned_frequencies: bool = False
    frequencies_shared: bool = True
    frequency_scale: float = 1.0
    neox_rotation: bool = False
    mlp_act: str = "swish"

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> "AttentionOptions":
        """The options in ``extra["authors"]["attention"]`` (or in ``extra["authors"]`` itself)."""
        source = extra.get("authors", {})
        source = source.get("attention", source)
        known = {field.name for field in fields(cls)}
        options = cls(**{key: value for key, value in source.items() if key in known})
        for name, allowed in (("qk_norm", NORMS), ("output_norm", NORMS), ("output_gate", OUTPUT_GATES)):
            if getattr(options, name) not in allowed:
                raise CheckpointError(f"attention option {name}={getattr(options, name)!r}; expected one of {allowed}")
        return options
