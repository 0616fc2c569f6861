"""A preset trained on a real CUDA device: the forward in bf16 autocast where the GPU computes bf16 natively
(fp32 weights and loss), the saved state as CPU tensors, and a run that moves between the GPU and the CPU when it
resumes. Skipped without CUDA (CI has none); the CPU side of the same feature is tests/train/test_device_training.py.
Run on a GPU machine with `python -m pytest -q tests/gpu/test_cuda_training.py`."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from repo_lens.cli import main
from repo_lens.train import train
from tests.train.test_device_training import interrupted_run, tiny, tiny_task

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def optimizer_devices(run) -> set[str]:
    """The devices of the saved AdamW state's tensors, as saved (torch.load without map_location restores them
    where they were; safetensors files hold CPU tensors by construction)."""
    optimizer = torch.load(run / "train_state" / "optimizer.pt", weights_only=True)
    return {value.device.type for entry in optimizer["state"].values() for value in entry.values()}


def test_a_cuda_run_trains_in_bf16_autocast_and_saves_cpu_tensors(tmp_path):
    seen: dict[str, set] = {"train": set(), "device": set()}

    def linear_output(module, args, output):
        if isinstance(module, torch.nn.Linear) and module.training:
            seen["train"].add(output.dtype)
            seen["device"].add(output.device.type)

    handle = torch.nn.modules.module.register_module_forward_hook(linear_output)
    try:
        cfg = tiny(device="cuda", steps=6, eval_every=3)
        result = train(cfg, tiny_task(cfg), tmp_path / "run", progress=False)
    finally:
        handle.remove()
    native = torch.cuda.is_bf16_supported()
    assert seen == {"train": {torch.bfloat16 if native else torch.float32}, "device": {"cuda"}}
    losses = [entry["train_loss"] for entry in result.history]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert optimizer_devices(tmp_path / "run") == {"cpu"}
    shipped = load_file(tmp_path / "run" / "model.safetensors")
    assert {tensor.dtype for tensor in shipped.values()} == {torch.float32}  # the tiny preset ships fp32


@pytest.mark.parametrize("first, then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_run_resumes_on_the_other_device(first, then, tmp_path):
    run = tmp_path / "run"
    interrupted_run(tiny(device=first), run, at_step=5)  # the state of step 3
    cfg = tiny(device=then)
    result = train(cfg, tiny_task(cfg), run, progress=False)
    assert result.steps == cfg.steps and [entry["step"] for entry in result.history] == [4, 8]
    assert json.loads((run / "train_config.json").read_text())["device"] == then
    assert optimizer_devices(run) == {"cpu"}
    optimizer = torch.load(run / "train_state" / "optimizer.pt", weights_only=True)
    assert {float(entry["step"]) for entry in optimizer["state"].values()} == {8.0}


def test_the_command_trains_a_preset_on_cuda(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("repo_lens.train.build_task", tiny_task)
    out = tmp_path / "run"
    code = main(["train", "--preset", "tiny", "--steps", "2", "--device", "cuda", "--batch-size", "4", "--lr", "1e-3",
                 "--warmup", "1", "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((out / "train_config.json").read_text())
    assert (saved["device"], saved["batch_size"], saved["lr"], saved["warmup"]) == ("cuda", 4, 1e-3, 1)
