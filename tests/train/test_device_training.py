"""A preset on a chosen device (``TrainConfig.device``, ``--device``): the CPU run is the run it always was, bf16
autocast really runs the forward in bf16 with the loss in fp32, the saved state is CPU tensors, and a run resumes
with its own settings only (the device, autocast and threads aside), a run saved before those fields existed
included. The CUDA runs are in tests/gpu/test_cuda_training.py."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file

from repo_lens.errors import CheckpointError, InputError
from repo_lens.train import ByteLMTask, preset, train
from repo_lens.train.config import TrainConfig
from repo_lens.train.loop import training_device_of, uses_autocast

TEXTS = ["the quick brown fox jumps over the lazy dog. " * 20, "pack my box with five dozen liquor jugs. " * 20]
NEW_FIELDS = ("device", "autocast")  # what a run saved before the device option lacks in train_config.json


def tiny_task(cfg: TrainConfig) -> ByteLMTask:
    return ByteLMTask({"mix": (TEXTS, TEXTS[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)


class Interrupted(Exception):
    pass


def interrupted_run(cfg: TrainConfig, directory, at_step: int) -> None:
    """Train into ``directory`` until the batch of ``at_step`` is asked for, as a killed run stops."""
    task = tiny_task(cfg)
    real = task.train_batch

    def batch(step):
        if step == at_step:
            raise Interrupted
        return real(step)

    task.train_batch = batch
    with pytest.raises(Interrupted):
        train(cfg, task, directory, progress=False)


def assert_same_run(left, right) -> None:
    """Two run folders hold the same weights, training state and history, bit for bit."""
    for name in ("model.safetensors", "train_state/state.safetensors"):
        a, b = load_file(left / name), load_file(right / name)
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a), name
    a, b = (torch.load(run / "train_state" / "optimizer.pt", weights_only=True) for run in (left, right))
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    assert all(torch.equal(a["state"][i][key], b["state"][i][key]) for i in a["state"] for key in a["state"][i])
    history = [json.loads((run / "train_state" / "progress.json").read_text())["history"] for run in (left, right)]
    assert history[0] == history[1]


def tiny(**settings) -> TrainConfig:
    return preset("tiny", mechanism="repo", **{"steps": 8, "checkpoint_every": 3, "eval_every": 4, **settings})


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted tiny run on the default device (the CPU)."""
    directory = tmp_path_factory.mktemp("straight") / "run"
    cfg = tiny()
    train(cfg, tiny_task(cfg), directory, progress=False)
    return directory


def test_the_defaults_train_on_the_cpu_in_fp32():
    cfg = TrainConfig(task="bytes")
    assert (cfg.device, cfg.autocast) == ("cpu", None)
    assert training_device_of(cfg) == torch.device("cpu") and uses_autocast(cfg, torch.device("cpu")) is False
    assert uses_autocast(TrainConfig(task="bytes", autocast=True), torch.device("cpu")) is True


def test_a_cpu_run_with_the_device_named_equals_one_without_it(straight, tmp_path):
    cfg = tiny(device="cpu")
    train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    assert_same_run(straight, tmp_path / "run")


def test_the_saved_state_is_cpu_tensors_that_load_with_map_location_cpu(straight):
    state = load_file(straight / "train_state" / "state.safetensors")
    optimizer = torch.load(straight / "train_state" / "optimizer.pt", weights_only=True, map_location="cpu")
    moments = [value for entry in optimizer["state"].values() for value in entry.values()]
    assert state and moments and {tensor.device.type for tensor in [*state.values(), *moments]} == {"cpu"}
    assert {float(entry["step"]) for entry in optimizer["state"].values()} == {8.0}


def test_bf16_autocast_runs_the_training_forward_in_bf16_and_the_loss_in_fp32(tmp_path, monkeypatch):
    seen: dict[str, set] = {"train": set(), "eval": set(), "loss": set()}

    def linear_output(module, args, output):
        if isinstance(module, torch.nn.Linear):
            seen["train" if module.training else "eval"].add(output.dtype)

    real = torch.nn.functional.cross_entropy

    def cross_entropy(logits, targets, **kwargs):
        if torch.is_grad_enabled():  # the training loss (the evaluation runs without gradients)
            seen["loss"].add(logits.dtype)
        return real(logits, targets, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", cross_entropy)
    handle = torch.nn.modules.module.register_module_forward_hook(linear_output)
    try:
        cfg = tiny(steps=4, eval_every=2, autocast=True)
        result = train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    finally:
        handle.remove()
    assert seen == {"train": {torch.bfloat16}, "eval": {torch.float32}, "loss": {torch.float32}}
    losses = [entry["train_loss"] for entry in result.history]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    weights = load_file(tmp_path / "run" / "train_state" / "state.safetensors")
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}  # fp32 master weights


def test_the_cpu_default_runs_the_forward_in_fp32(tmp_path):
    dtypes = set()
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: dtypes.add(output.dtype) if isinstance(module, torch.nn.Linear) else None)
    try:
        cfg = tiny(steps=1, eval_every=1)
        train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    finally:
        handle.remove()
    assert dtypes == {torch.float32}


def test_a_device_this_machine_lacks_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tiny(device="cuda")
    with pytest.raises(InputError, match=r"cannot train on device 'cuda': .*CUDA is not available.*--device cpu"):
        train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_run_saved_before_the_device_option_resumes_bit_for_bit(straight, tmp_path):
    cfg = tiny()
    run = tmp_path / "run"
    interrupted_run(cfg, run, at_step=5)  # the state of step 3 is saved
    saved = json.loads((run / "train_config.json").read_text())
    (run / "train_config.json").write_text(json.dumps({k: v for k, v in saved.items() if k not in NEW_FIELDS}))
    train(cfg, tiny_task(cfg), run, progress=False)
    assert_same_run(straight, run)
    assert json.loads((run / "train_config.json").read_text())["device"] == "cpu"


def test_a_run_started_on_another_device_resumes_here(straight, tmp_path):
    """The device and autocast are not the recipe: a state saved on a GPU (CPU tensors) resumes on the CPU."""
    cfg = tiny()
    run = tmp_path / "run"
    interrupted_run(cfg, run, at_step=5)
    saved = json.loads((run / "train_config.json").read_text())
    (run / "train_config.json").write_text(json.dumps({**saved, "device": "cuda:1", "autocast": None}))
    train(cfg, tiny_task(cfg), run, progress=False)
    assert_same_run(straight, run)


@pytest.mark.parametrize("setting", [{"batch_size": 4}, {"lr": 1e-3}, {"warmup": 2}, {"steps": 9}, {"seed": 1}])
def test_resuming_with_another_recipe_is_refused_and_changes_nothing(setting, tmp_path):
    cfg = tiny()
    run = tmp_path / "run"
    interrupted_run(cfg, run, at_step=5)
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file() and path.suffix != ".lock"}
    changed = tiny(**setting)
    (key, value), = setting.items()
    expected = (f"{run} holds a run that started with other settings ({key} {getattr(cfg, key)!r} there, "
                f"{value!r} asked); resume it with the settings it started with")
    with pytest.raises(InputError, match=re.escape(expected)):
        train(changed, tiny_task(changed), run, progress=False)
    assert {path: path.read_bytes() for path in before} == before


def test_a_damaged_train_config_is_refused_naming_it(tmp_path):
    cfg = tiny()
    run = tmp_path / "run"
    interrupted_run(cfg, run, at_step=5)
    (run / "train_config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"cannot resume from .*train_config.json holds a list"):
        train(cfg, tiny_task(cfg), run, progress=False)



# --- the command line: repo-lens train --preset NAME with --device, --batch-size, --lr, --warmup, --no-autocast ----

OVERRIDES = ("--batch-size", "4", "--lr", "5e-4", "--warmup", "1", "--device", "cpu", "--no-autocast")


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    from repo_lens.cli import main

    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def preset_argv(out, *extra: str) -> list[str]:
    return ["train", "--preset", "tiny", "--steps", "2", "--quiet", "--out", str(out), *extra]


@pytest.fixture
def built(monkeypatch) -> list[TrainConfig]:
    """The configs the command builds its task from; the task is the tiny text (no corpus download)."""
    configs: list[TrainConfig] = []

    def build_task(cfg):
        configs.append(cfg)
        return tiny_task(cfg)

    monkeypatch.setattr("repo_lens.train.build_task", build_task)
    return configs


def test_the_command_applies_each_override_to_the_preset(built, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(preset_argv(out, *OVERRIDES), capsys)
    assert code == 0, err
    cfg = built[0]
    assert (cfg.batch_size, cfg.lr, cfg.warmup, cfg.device, cfg.autocast) == (4, 5e-4, 1, "cpu", False)
    saved = json.loads((out / "train_config.json").read_text())
    expected = {**preset("tiny", steps=2).to_dict(), "batch_size": 4, "lr": 5e-4, "warmup": 1, "autocast": False}
    assert saved == json.loads(json.dumps(expected))  # the preset's own settings for the rest
    # the last of the 2 steps (index 1) is past the 1-step warm-up, at the top of the cosine: lr = 5e-4 itself
    groups = torch.load(out / "train_state" / "optimizer.pt", weights_only=True)["param_groups"]
    assert {group["lr"] / group["lr_scale"] for group in groups} == {5e-4}


def test_the_command_with_device_cpu_trains_the_run_it_trains_without_it(built, tmp_path, capsys):
    for name, extra in (("plain", ()), ("cpu", ("--device", "cpu"))):
        code, err = run_cli(preset_argv(tmp_path / name, *extra), capsys)
        assert code == 0, err
    assert_same_run(tmp_path / "plain", tmp_path / "cpu")


def test_the_command_refuses_cuda_where_there_is_none(built, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "run"
    code, err = run_cli(preset_argv(out, "--device", "cuda"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "argument --device: 'cuda' is not a device to train on here" in err and "use --device cpu" in err
    assert not out.exists() and not built


@pytest.mark.parametrize("flag, value, message", [
    ("--lr", "0", "argument --lr: must be > 0"), ("--lr", "-3e-4", "argument --lr: must be > 0"),
    ("--lr", "nan", "argument --lr: must be > 0"), ("--lr", "fast", "argument --lr: expected a number > 0"),
    ("--warmup", "-1", "argument --warmup: must be within [0, 10000000]"),
    ("--warmup", "2.5", "argument --warmup: expected a whole number"),
    ("--batch-size", "0", "argument --batch-size: must be ≥ 1"), ("--device", "tpu", "argument --device"),
])
def test_the_command_refuses_a_bad_value(flag, value, message, built, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = run_cli(preset_argv(out, f"{flag}={value}"), capsys)
    assert code == 2 and err.startswith("repo-lens: error: ") and message in err, err
    assert not out.exists() and not built


def test_the_command_resumes_on_another_device_flag_but_refuses_another_batch_size(built, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(preset_argv(out, "--steps", "1"), capsys)[0] == 0
    code, err = run_cli(preset_argv(out, "--device", "cpu", "--no-autocast"), capsys)  # 2 steps now: refused
    assert code == 2 and "(steps 1 there, 2 asked)" in err, err
    code, err = run_cli(preset_argv(out, "--steps", "1", "--device", "auto", "--batch-size", "3"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{out} holds a run that started with other settings (batch_size 8 there, 3 asked)" in err
    assert "only --device, --no-autocast and --threads may change" in err
    code, err = run_cli(preset_argv(out, "--steps", "1", "--device", "auto", "--no-autocast"), capsys)
    assert code == 0, err
