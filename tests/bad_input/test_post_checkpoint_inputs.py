"""Bad learned-increments post checkpoints ("Learned position increments", Brendan Long): each a clear
CheckpointError naming the key, field or format, never a silent fallback and never code run from the file.

Ids by class: ``file-...`` (the file itself), ``dict-...`` (the checkpoint dict), ``config-...``
(model_config), ``weights-...`` (model_state_dict)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

import repo_lens
from repo_lens import CheckpointError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from increments_post.reference_post import post_config, write_post_checkpoint  # noqa: E402


def _valid(tmp_path: Path, **overrides) -> tuple[Path, dict]:
    cfg = post_config(**({"pos_encoding": "selective_rope"} | overrides))
    path, _ = write_post_checkpoint(tmp_path, cfg, seed=1)
    return path, torch.load(path, weights_only=True)


def _rewrite(path: Path, checkpoint) -> Path:
    torch.save(checkpoint, path)
    return path


def _config(**changes):
    def edit(checkpoint):
        config = dict(checkpoint["model_config"])
        for key, value in changes.items():
            if value is _DROP:
                config.pop(key)
            else:
                config[key] = value
        return {**checkpoint, "model_config": config}
    return edit


def _weights(drop=(), add=None, replace=None):
    def edit(checkpoint):
        state = {name: tensor for name, tensor in checkpoint["model_state_dict"].items() if name not in drop}
        state.update(add or {})
        for name, tensor in (replace or {}).items():
            state[name] = tensor
        return {**checkpoint, "model_state_dict": state}
    return edit


def _forget_mlp(heads: int = 4, hidden: int = 8, dim: int = 32) -> dict[str, torch.Tensor]:
    """The post's ForgetMLP weights (decay="learned"), of ``heads`` outputs."""
    return {"forget_mlp.fc1.weight": torch.zeros(hidden, dim), "forget_mlp.fc1.bias": torch.zeros(hidden),
            "forget_mlp.fc2.weight": torch.zeros(heads, hidden), "forget_mlp.fc2.bias": torch.zeros(heads)}


_DROP = object()
# id -> (edit of the valid checkpoint dict, what the error must say)
CASES = {
    "dict-neither-format": (lambda c: {"weights": c["model_state_dict"]}, r"looked for a CoPE .* and for a learned-increments post"),
    "dict-a-list": (lambda c: [1, 2, 3], r"looked for a CoPE .* learned-increments post .*found list"),
    "dict-missing-config": (lambda c: {"step": 1, "model_state_dict": c["model_state_dict"]}, r"lacks \['model_config'\]"),
    "dict-surplus-entry": (lambda c: {**c, "optimizer": {}}, r"unexpected entries \['optimizer'\]"),
    "dict-state-not-a-dict": (lambda c: {**c, "model_state_dict": [1]}, "model_state_dict is list"),
    "dict-config-not-a-dict": (lambda c: {**c, "model_config": "selective_rope"}, "model_config is str"),
    "dict-bad-step": (lambda c: {**c, "step": -3}, "step is -3"),
    "config-unknown-pos-encoding": (_config(pos_encoding="alibi_rope"), r"pos_encoding='alibi_rope' .*'selective_pope'"),
    "config-unknown-decay": (_config(decay="exponential"), r"decay='exponential' .*'learned'"),
    "weights-forget-mlp-missing": (_config(decay="learned"), r"missing weights .*forget_mlp\.fc1\.bias"),
    "weights-forget-mlp-one-missing": (lambda c: _config(decay="learned")(_weights(drop=("forget_mlp.fc2.weight",))(
        _weights(add=_forget_mlp())(c))), r"missing weights .*: \['forget_mlp\.fc2\.weight'\]"),
    "weights-forget-mlp-without-decay": (_weights(add={"forget_mlp.fc2.bias": torch.zeros(4)}),
                                         r"surplus weights .*forget_mlp\.fc2\.bias"),
    "weights-forget-mlp-with-alibi": (lambda c: _config(decay="alibi")(_weights(add=_forget_mlp())(c)),
                                      r"surplus weights .*forget_mlp\.fc1\.weight"),
    "weights-forget-mlp-misshapen": (lambda c: _config(decay="learned")(_weights(add=_forget_mlp(heads=3))(c)),
                                     r"forget_mlp\.fc2\.weight: checkpoint \(3, 8\) vs model \(4, 8\)"),
    "config-unknown-field": (_config(rope_scaling=2.0), r"unknown fields \['rope_scaling'\]"),
    "config-missing-dim": (_config(dim=_DROP), r"lacks the required fields \['dim'\]"),
    "config-string-heads": (_config(n_heads="4"), "n_heads='4'; expected a positive integer"),
    "config-flag-not-bool": (_config(per_layer_delta="yes"), "per_layer_delta='yes'; expected true or false"),
    "config-odd-head-width": (_config(n_heads=32), "heads of an even width"),
    "config-computed-head-dim-disagrees": (_config(head_dim=16), r"head_dim=16 disagrees"),
    "config-layernorm": (_config(norm_type="layernorm"), "norm_type='layernorm'"),
    "config-negative-theta": (_config(rope_theta=-1.0), "rope_theta=-1.0"),
    "weights-shape-disagrees-with-config": (_config(intermediate_dim=80), r"layers\.0\.ffn\.w_gate\.weight: checkpoint \(64, 32\) vs model \(80, 32\)"),
    "weights-wq-misshapen": (_weights(replace={"layers.1.attn.wq.weight": torch.zeros(16, 32)}), r"layers\.1\.attn\.wq\.weight: checkpoint \(16, 32\)"),
    "weights-missing-key": (_weights(drop=("layers.1.ffn_norm.weight",)), r"missing weights .*layers\.1\.ffn_norm\.weight"),
    "weights-missing-delta-mlp": (_weights(drop=("delta_mlp.fc2.bias",)), r"missing weights .*delta_mlp\.fc2\.bias"),
    "weights-extra-key": (_weights(add={"layers.0.attn.extra.weight": torch.zeros(2)}), r"surplus weights .*layers\.0\.attn\.extra\.weight"),
    "weights-per-layer-mlps-for-a-shared-config": (_weights(add={"delta_mlps.0.fc1.bias": torch.zeros(8)}), r"surplus weights .*delta_mlps\.0\.fc1\.bias"),
    "weights-non-tensor": (_weights(add={"layers.0.note": "hi"}), r"entries \['layers\.0\.note'\] are not weight name -> tensor"),
    "weights-integer-tensor": (_weights(replace={"final_norm.weight": torch.ones(32, dtype=torch.int64)}), r"non-floating .*final_norm\.weight"),
    "weights-nan": (_weights(replace={"final_norm.weight": torch.full((32,), float("nan"))}), r"NaN .*final_norm\.weight"),
    "weights-twice-with-compile-prefix": (_weights(add={"_orig_mod.final_norm.weight": torch.ones(32)}), r"'final_norm\.weight' twice"),
    "weights-frozen-table-misshapen": (_weights(drop=("delta_mlp.fc1.weight", "delta_mlp.fc1.bias", "delta_mlp.fc2.weight",
                                                      "delta_mlp.fc2.bias"), add={"frozen_delta.deltas": torch.ones(257, 3)}),
                                       r"frozen_delta\.deltas has shape \(257, 3\); expected \[257\] or \[257, 4\]"),
    "weights-frozen-table-without-delta": (lambda c: _config(pos_encoding="rope")(_weights(
        drop=tuple(n for n in c["model_state_dict"] if n.startswith("delta_mlp")), add={"frozen_delta.deltas": torch.ones(257)})(c)),
        r"frozen_delta\.deltas is present but pos_encoding='rope'"),
    "weights-frozen-table-per-layer": (lambda c: _config(per_layer_delta=True)(_weights(add={"frozen_delta.deltas": torch.ones(257)})(c)),
                                       "frozen_delta.deltas is present with per_layer_delta=true"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_checkpoints_are_refused_by_name(tmp_path, case):
    edit, message = CASES[case]
    path, checkpoint = _valid(tmp_path)
    _rewrite(path, edit(checkpoint))
    with pytest.raises(CheckpointError, match=message):
        repo_lens.load(path, device="cpu")


def test_file_truncated(tmp_path):
    path, _ = _valid(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"step_100\.pt .*is not a readable torch checkpoint"):
        repo_lens.load(path, device="cpu")


def test_file_empty(tmp_path):
    path = tmp_path / "step_5.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="is not a readable torch checkpoint"):
        repo_lens.load(path, device="cpu")


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_file_with_a_pickled_object_is_refused_and_never_run(tmp_path):
    path, checkpoint = _valid(tmp_path)
    marker = tmp_path / "ran"
    _rewrite(path, {**checkpoint, "model_config": {**checkpoint["model_config"], "dim": _Payload(marker)}})
    with pytest.raises(CheckpointError, match="refuses to unpickle .*system"):
        repo_lens.load(path, device="cpu")
    assert not marker.exists()


def test_folder_of_step_files_with_a_bad_latest_names_that_file(tmp_path):
    _valid(tmp_path)
    (tmp_path / "step_900.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"step_900\.pt .*not a readable torch checkpoint"):
        repo_lens.load(tmp_path, device="cpu")
