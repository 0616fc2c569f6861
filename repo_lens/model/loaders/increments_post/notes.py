"""What ``meta["authors"]["notes"]`` says about a loaded checkpoint of the post."""

from __future__ import annotations

from typing import Any

CODE = ("\"Learned position increments\" (Brendan Long), github.com/brendanlong/learned-position-increments-experiment, "
        "experiments/selective_pe")


def post_notes(fields: dict[str, Any], kind: str, stripped: bool, picked: str | None) -> list[str]:
    """Where repo_lens' reading of the post's checkpoint needs saying."""
    notes = ["its RoPE rotates adjacent channel pairs (2i, 2i+1); the query and key rows of each head are reordered "
             "to repo_lens' half-split layout, which leaves q·k unchanged"]
    if fields["pos_encoding"].startswith("selective"):
        notes.append("positions are the inclusive running sum of δ (the first token sits at δ_0, not 0); the trace's "
                     "increments are δ")
    if kind.startswith("lpi-resid"):
        notes.append("per-layer δ = 10·sigmoid(DeltaMLP(RMSNorm(x))) from the residual stream entering each block, "
                     "through the DeltaMLP's own RMSNorm (eps = float32's machine epsilon)")
    if kind == "lpi-table":
        notes.append("the frozen δ table (frozen_delta.deltas) is held per vocabulary id and head; a [vocab] table is "
                     "repeated for every head")
    if fields["decay"] == "alibi":
        notes.append("decay='alibi': every layer adds −m_h·(i − j) to its scores on top of the rotation, m_h = "
                     "(2^(−8/H))^(h+1) (the model's decay 'alibi'; log α = −m_h at hook_log_forget)")
    if fields["decay"] == "learned":
        notes.append("decay='learned': its forget_mlp (forget_mlp.fc1/fc2) is the model's decay 'forget': every layer "
                     "adds A_i − A_j to its scores, A = Σ log α per head, log α = logsigmoid(forget_mlp(embedding)) at "
                     "hook_log_forget; each layer's levels A at attn.hook_decay")
    if stripped:
        notes.append("weight names carried torch.compile's '_orig_mod.' prefix; it was removed")
    if picked:
        notes.append(picked)
    if fields["vocab_size"] not in (257, 50257):
        notes.append(f"a vocabulary of {fields['vocab_size']} ids is neither its byte vocabulary (257) nor GPT-2's "
                     "(50,257): no tokenizer, pass token ids")
    return notes
