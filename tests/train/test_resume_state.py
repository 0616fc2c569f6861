"""The resumable training state: model weights in safetensors, AdamW's own state_dict in optimizer.pt (read back
with weights_only=True), and a resumed run that ends bit for bit where an unbroken one does."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from repo_lens import CheckpointError
from repo_lens.train import ByteLMTask, preset, train

TEXTS = ["the quick brown fox jumps over the lazy dog. " * 20, "pack my box with five dozen liquor jugs. " * 20]


def tiny_task(cfg):
    return ByteLMTask({"mix": (TEXTS, TEXTS[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)


class Interrupted(Exception):
    pass


class Unpickled:
    """Unpickling this would create ``marker``: a state file must never be unpickled as objects."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    cfg = preset("tiny", mechanism="repo", steps=12, checkpoint_every=5, eval_every=6)
    train(cfg, tiny_task(cfg), root / "straight", progress=False)
    crashing = tiny_task(cfg)
    real_batch = crashing.train_batch

    def batch_then_crash(step):
        if step == 7:  # two steps after the checkpoint at step 5
            raise Interrupted
        return real_batch(step)

    crashing.train_batch = batch_then_crash
    with pytest.raises(Interrupted):
        train(cfg, crashing, root / "resumed", progress=False)
    saved = torch.load(root / "resumed" / "train_state" / "optimizer.pt", weights_only=True)
    train(cfg, tiny_task(cfg), root / "resumed", progress=False)
    return cfg, root, saved


def test_the_saved_optimizer_state_is_adamws_state_dict(runs):
    _, _, saved = runs  # as written at the checkpoint of step 5
    assert set(saved) == {"state", "param_groups"}
    assert {float(entry["step"]) for entry in saved["state"].values()} == {5.0}
    assert all(set(entry) == {"step", "exp_avg", "exp_avg_sq"} for entry in saved["state"].values())
    assert [group["lr_scale"] for group in saved["param_groups"]] and all(
        group["betas"] == (0.9, 0.95) for group in saved["param_groups"])


def test_a_resumed_run_ends_exactly_where_an_unbroken_one_does(runs):
    cfg, root, _ = runs
    for name in ("model.safetensors", "train_state/state.safetensors"):
        straight, resumed = load_file(root / "straight" / name), load_file(root / "resumed" / name)
        assert straight.keys() == resumed.keys()
        assert all(torch.equal(straight[key], resumed[key]) for key in straight), name
    straight, resumed = (torch.load(root / run / "train_state" / "optimizer.pt", weights_only=True)
                         for run in ("straight", "resumed"))
    assert straight["param_groups"] == resumed["param_groups"]
    assert straight["state"].keys() == resumed["state"].keys()
    for index, entry in straight["state"].items():
        assert float(entry["step"]) == cfg.steps
        assert all(torch.equal(entry[key], resumed["state"][index][key]) for key in entry)
    assert (root / "straight/train_state/progress.json").read_text().split('"wall_seconds"')[0] == \
        (root / "resumed/train_state/progress.json").read_text().split('"wall_seconds"')[0]


@pytest.mark.parametrize("damage", ["empty", "truncated", "object"])
def test_a_damaged_or_unsafe_optimizer_state_is_refused_without_unpickling(tmp_path, damage):
    cfg = preset("tiny", mechanism="repo", steps=2, checkpoint_every=1)
    train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    state = tmp_path / "run" / "train_state" / "optimizer.pt"
    marker = tmp_path / "unpickled"
    if damage == "empty":
        state.write_bytes(b"")
    elif damage == "truncated":
        state.write_bytes(state.read_bytes()[:200])
    else:
        torch.save({"state": {}, "param_groups": [], "extra": Unpickled(marker)}, state)
    more = preset("tiny", mechanism="repo", steps=3, checkpoint_every=1)
    with pytest.raises(CheckpointError, match="cannot resume from .*train_state.*delete it to start over") as error:
        train(more, tiny_task(more), tmp_path / "run", progress=False)
    assert not marker.exists()
    assert "\x1b" not in str(error.value) and "\n" not in str(error.value)  # one plain line
    if damage == "object":
        assert "optimizer.pt holds more than tensors and numbers, and is never unpickled" in str(error.value)
