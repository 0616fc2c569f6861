"""Training from scratch with a decay (``repo-lens train --decay``, ``TrainConfig.decay``): the loss falls, the
checkpoint reloads with its decay, and what a decay cannot train with is refused before anything is written."""

from __future__ import annotations

import json

import pytest
import torch

import repo_lens
from repo_lens.cli import main
from repo_lens.train import ByteLMTask, build_model, preset, train

TEXTS = ["the quick brown fox jumps over the lazy dog. " * 20, "pack my box with five dozen liquor jugs. " * 20,
         "中文的句子也要学习一下。" * 30]


def tiny_task(cfg):
    return ByteLMTask({"mix": (TEXTS, TEXTS[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)


@pytest.mark.training
def test_a_few_steps_with_a_learned_forget_gate_reduce_the_loss(tmp_path):
    cfg = preset("tiny", mechanism="lpi", decay="forget", steps=40)
    task = tiny_task(cfg)
    start = build_model(cfg, task.vocab_size).eval()
    assert start.cfg.decay == "forget"
    assert float(start.decay.fc2.bias.detach().min()) == pytest.approx(6.9)  # α ≈ 0.999: almost no decay at the start
    before = task.evaluate(start)["val_bpb"]
    result = train(cfg, task, tmp_path / "run", progress=False)
    assert result.metrics["val_bpb"] < before - 1.0  # bits per byte, from ~8 at random init
    lens = repo_lens.load(tmp_path / "run", device="cpu")
    assert lens.model.cfg.decay == "forget" and lens.model.layer_kinds == ["lpi", "lpi"]
    assert not torch.equal(lens.model.decay.fc1.weight, start.decay.fc1.weight.to(lens.model.decay.fc1.weight.dtype))
    trace = lens.trace("the quick brown fox", progress=False)
    assert trace.meta["mechanism"]["decay"] == "forget"
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["decay"] == "forget"


@pytest.mark.training
def test_the_command_line_trains_an_alibi_decay(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--mechanism", "rope", "--decay", "alibi", "--steps", "2", "--quiet",
                 "--out", str(out)]) == 0
    assert "with decay alibi" in capsys.readouterr().out
    lens = repo_lens.load(out, device="cpu")
    assert lens.model.cfg.decay == "alibi" and lens.meta["info"]["train_config"]["decay"] == "alibi"


@pytest.mark.parametrize("argv, message", [
    (["--preset", "tiny", "--mechanism", "fox", "--decay", "forget"], "--mechanism fox biases the scores itself"),
    (["--base", "zoo:smollm2-135m", "--decay", "alibi"], "--decay trains a model from scratch"),
])
def test_a_decay_that_cannot_train_is_refused_before_writing(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", *argv, "--steps", "1", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("repo-lens: error: ") and message in err, err
    assert not out.exists()
