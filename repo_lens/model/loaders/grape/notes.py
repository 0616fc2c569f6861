"""Where the GRAPE authors' code departs from their paper (and their own docstrings), per variant:
repo_lens follows the code, and each loaded model records these notes in ``meta["authors"]["notes"]``."""

from __future__ import annotations

from typing import Any

_COMMON = [
    "rotations are the code's: y1 = x1·cos + x2·sin, y2 = −x1·sin + x2·cos on the two halves of each head "
    "(a rotation by −angle; q·k still depends only on position differences)",
    "a one-token input runs the key/value shift unshifted (ShiftLinear shifts only when seq_len > 1); longer "
    "inputs shift the first token against zero",
]
_NOTES = {
    "llama-mha-rope": ["q and k are rotated before their RMSNorm (the norm's weight acts on rotated coordinates)"],
    "llama-mha-grape-m-nonctx": [
        "positions are the index t; the per-plane frequencies are learned: θ = exp(log_freq / "
        "grape_log_freq_scale) (16 unless set), q and k rotated before their RMSNorm"],
    "llama-mha-grape-m-ctx": [
        "ω_t = sigmoid(omega_proj(x_t) / grape_ctx_omega_scale), not the softplus the comments and paper name; one "
        "ω per token shared by the heads unless grape_ctx_per_head; Φ_t = Σ_{τ<t} ω_τ, θ = exp(log_freq) learned",
        "q and k are rotated before their RMSNorm"],
    "llama-mha-grape-ap-v1": [
        "ψ(i, l) = m_h·logsigmoid(p_i·R(l)p̂_l / d_p): raw p on the query side, RMS-normalised p rotated by the "
        "angle l (every frequency 1: their Rotary(base=1)) on the key side, divided by d_p, scaled by ALiBi's slopes",
        "positions: Σ_{s≤j} −ψ(T, s) as seen from the last query T; hook_potential holds ψ"],
    "llama-mha-alibi": ["the bias −m_h·(i − j) with ALiBi's slopes, as the zoo's alibi"],
    "llama-mha-fox": ["head_dim = n_embd / n_head (the config's head_dim is not read); q and k normalised "
                      "(one weight shared by the heads) before any rotation"],
}
_GATED = [
    "b(i, j) = −(i − j)·softplus(omega_h)·m_h·r_ij: the docstring's ω_h is also scaled by ALiBi's slopes m_h; the "
    "gates are softplus of L2-normalised u/v times the RMS-normalised k/q, divided by √d_head",
    "published as path sums: ψ(i, l) = b(i, l − 1) − b(i, l) in hook_potential, positions = Σ_{s≤j} −ψ(T, s) "
    "(0 at the first token; ALiBi's m_h·t when every gate is 1)",
]


def variant_notes(variant: str, options: dict[str, Any]) -> list[str]:
    """The notes a GRAPE checkpoint of ``variant`` records (its options decide the shift note).

    >>> variant_notes("llama-mha-grape-m-ctx", {})[0][:22]
    'ω_t = sigmoid(omega_pr'
    """
    notes = list(_NOTES.get(variant, _GATED if variant.startswith("llama-mha-grape-a-") else []))
    rotating = variant in ("llama-mha-rope", "llama-mha-grape-m-ctx", "llama-mha-grape-m-nonctx") or options.get("rope")
    notes += [_COMMON[0]] if rotating else []
    notes += [_COMMON[1]] if options.get("k_shift") or options.get("v_shift") else []
    return notes
