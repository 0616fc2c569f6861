"""The training loop: few steps reduce the loss, runs resume exactly, checkpoints load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.train import ByteLMTask, ReversalTask, preset, train
from repo_lens.train.schedule import learning_rate

TEXTS = ["the quick brown fox jumps over the lazy dog. " * 20, "pack my box with five dozen liquor jugs. " * 20,
         "中文的句子也要学习一下。" * 30]


def tiny_task(cfg):
    return ByteLMTask({"mix": (TEXTS, TEXTS[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)


def test_a_few_steps_reduce_the_loss(tmp_path):
    cfg = preset("tiny", mechanism="repo", steps=40)
    task = tiny_task(cfg)
    from repo_lens.train import build_model

    before = task.evaluate(build_model(cfg, task.vocab_size).eval())["val_bpb"]
    result = train(cfg, task, tmp_path / "run", progress=False)
    assert result.metrics["val_bpb"] < before - 1.0  # bits per byte, from ~8 at random init
    lens = repo_lens.load(tmp_path / "run", device="cpu")
    assert lens.model.layer_kinds == ["rope", "repo"]
    assert lens.meta["info"]["metrics"]["val_bpb"] == pytest.approx(result.metrics["val_bpb"])
    assert lens.trace("the quick brown fox").positions.shape == (2, 2, 19)


class Interrupted(Exception):
    pass


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    cfg = preset("tiny", mechanism="repo", steps=20, checkpoint_every=10)
    straight = train(cfg, tiny_task(cfg), tmp_path / "straight", progress=False)
    crashing = tiny_task(cfg)
    real_batch = crashing.train_batch

    def batch_then_crash(step):
        if step == 13:  # killed three steps after the checkpoint at step 10
            raise Interrupted
        return real_batch(step)

    crashing.train_batch = batch_then_crash
    with pytest.raises(Interrupted):
        train(cfg, crashing, tmp_path / "resumed", progress=False)
    resumed = train(cfg, tiny_task(cfg), tmp_path / "resumed", progress=False)
    assert resumed.steps == 20
    assert resumed.metrics["val_bpb"] == pytest.approx(straight.metrics["val_bpb"], abs=1e-5)


def test_schedule_warms_up_then_decays():
    rates = [learning_rate(step, 1.0, 10, 100) for step in range(100)]
    assert rates[9] == pytest.approx(1.0) and all(a <= b for a, b in zip(rates[:10], rates[1:10]))
    assert all(a >= b for a, b in zip(rates[10:], rates[11:])) and rates[-1] == pytest.approx(0.1, abs=1e-3)


def test_reversal_examples_and_loss_mask():
    task = ReversalTask(batch_size=4)
    inputs, targets = task.train_batch(0)
    for row in range(4):
        ids = inputs[row].tolist()
        sep = ids.index(task.index["<sep>"])
        items = ids[6:sep]
        answer = [t for t in targets[row].tolist() if t != -100]
        assert answer == items[::-1] + [task.index["<eos>"]]
        assert 2 <= len(items) <= 20


def test_unigram_baseline_is_an_honest_cross_entropy():
    task = ByteLMTask({"a": (["abab" * 100], ["abab" * 100])}, context=8, batch_size=2)
    # counts a=200, b=200, separator=1, add-one smoothing over 257 symbols -> total 658
    import math

    expected = (400 * -math.log2(201 / 658) + -math.log2(2 / 658)) / 401
    assert task.unigram_bpb()["unigram_bpb_a"] == pytest.approx(expected)


def test_position_init_std_scales_only_the_position_modules_initial_weights():
    from repo_lens.train import build_model
    from repo_lens.train.loop import is_position_parameter

    default = dict(build_model(preset("tiny", mechanism="repo"), 257).named_parameters())
    same = dict(build_model(preset("tiny", mechanism="repo", position_init_std=0.02), 257).named_parameters())
    wide = dict(build_model(preset("tiny", mechanism="repo", position_init_std=0.5), 257).named_parameters())
    positions = [name for name in default if is_position_parameter(name)]
    assert positions == [f"blocks.1.attn.mechanism.{part}.weight" for part in ("gate_map", "content_map", "final_map")]
    for name, param in default.items():
        torch.testing.assert_close(same[name], param, rtol=0, atol=0)  # None means 0.02: the same draws
        # the same normal draws, 25 (= 0.5 / 0.02) times wider in the position module and nowhere else
        torch.testing.assert_close(wide[name], param * (25.0 if name in positions else 1.0))


def test_position_lr_scale_multiplies_the_position_modules_first_adam_step(tmp_path):
    from repo_lens.train import build_model
    from repo_lens.train.loop import is_position_parameter

    def first_step(**settings):
        cfg = preset("tiny", mechanism="repo", steps=1, **settings)
        start = {n: p.detach().clone() for n, p in build_model(cfg, 257).named_parameters()}
        out = tmp_path / f"run-{len(settings)}"
        train(cfg, tiny_task(cfg), out, progress=False)
        trained = dict(repo_lens.load(out, device="cpu").model.named_parameters())
        return {name: trained[name].detach() - value for name, value in start.items()}

    scale = 8.0
    plain, scaled = first_step(), first_step(position_lr_scale=scale)
    moved = 0
    for name, step in plain.items():
        # Adam's first step is lr * g / (|g| + eps) (plus decoupled decay lr * wd * p): linear in the lr
        factor = scale if is_position_parameter(name) else 1.0
        torch.testing.assert_close(scaled[name], step * factor, rtol=1e-4, atol=1e-7)  # fp32 rounding of p
        moved += is_position_parameter(name) and bool(step.abs().max() > 0)
    assert moved == 3


def test_a_snapshot_holds_the_model_at_its_step_with_tied_embeddings(tmp_path):
    """``snapshot_every`` keeps a loadable copy at each multiple before the end; it equals the training state a
    run stopped at that step saved, and a tied model's unembedding is its embedding."""
    from safetensors.torch import load_file

    cfg = preset("tiny", mechanism="repo", steps=20, checkpoint_every=10, snapshot_every=10, tie_embeddings=True)
    train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    assert sorted(path.name for path in (tmp_path / "run" / "snapshots").iterdir()) == ["step_10"]
    stopping = tiny_task(cfg)
    real_batch = stopping.train_batch

    def batch_then_stop(step):
        if step == 10:  # the state of step 10 is saved just before this batch is asked for
            raise Interrupted
        return real_batch(step)

    stopping.train_batch = batch_then_stop
    with pytest.raises(Interrupted):
        train(cfg, stopping, tmp_path / "stopped", progress=False)
    state = load_file(str(tmp_path / "stopped" / "train_state" / "state.safetensors"))
    snapshot = repo_lens.load(tmp_path / "run" / "snapshots" / "step_10", device="cpu").model
    assert snapshot.cfg.tie_word_embeddings and snapshot.unembed.weight is snapshot.embed.weight
    for name, tensor in snapshot.state_dict().items():
        if name != "unembed.weight":
            assert torch.equal(tensor, state[f"model.{name}"]), name
