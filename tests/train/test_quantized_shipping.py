"""TrainConfig.ship_dtype "int8" / "int7" / "int6": the trainer's shipped model and snapshots are stored
quantized, its final metrics are measured on the weights a load gives back, and the training state keeps the
unrounded weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from repo_lens.errors import InputError
from repo_lens.model.loaders import load_checkpoint
from repo_lens.train import ByteLMTask, TrainConfig, preset, train

TEXTS = ["the quick brown fox jumps over the lazy dog. " * 20, "pack my box with five dozen liquor jugs. " * 20]


def tiny_task(cfg):
    return ByteLMTask({"mix": (TEXTS, TEXTS[::-1])}, cfg.context, cfg.batch_size, seed=cfg.seed,
                      eval_batches=cfg.eval_batches)


@pytest.mark.parametrize("ship_dtype", ["int4", "fp8", "torch.bfloat16", "", None])
def test_a_ship_dtype_that_is_no_storage_is_refused(ship_dtype):
    with pytest.raises(InputError, match=r"ship_dtype .* use one of float32, bfloat16, float16, float64, int8, int7, "
                                         r"int6"):
        TrainConfig(task="bytes", ship_dtype=ship_dtype)
    with pytest.raises(InputError, match="ship_dtype"):
        preset("tiny", ship_dtype=ship_dtype or "bf16")


def test_every_storage_name_is_accepted():
    assert [TrainConfig(task="bytes", ship_dtype=name).ship_dtype for name in ("int8", "int7", "int6", "bfloat16")] \
        == ["int8", "int7", "int6", "bfloat16"]


def test_an_int6_run_ships_and_snapshots_quantized_with_metrics_measured_on_the_shipped_weights(tmp_path):
    cfg = preset("tiny", mechanism="repo", steps=4, eval_every=2, checkpoint_every=2, snapshot_every=2,
                 ship_dtype="int6")
    task = tiny_task(cfg)
    result = train(cfg, task, tmp_path / "run", progress=False)
    for folder in (tmp_path / "run", tmp_path / "run" / "snapshots" / "step_2"):
        config = json.loads((folder / "config.json").read_text())
        assert config["repo_lens_format"] == 2 and config["storage"] == {"scheme": "int8-rows", "levels": 31}
    shipped = load_checkpoint(tmp_path / "run", device="cpu").model
    assert result.metrics["val_bpb"] == pytest.approx(task.evaluate(shipped)["val_bpb"], abs=1e-9)
    # the shipped codes are those of the training weights (kept unrounded in the training state)
    training = {name[len("model."):]: tensor
                for name, tensor in load_file(str(tmp_path / "run" / "train_state" / "state.safetensors")).items()}
    stored = load_file(str(tmp_path / "run" / "model.safetensors"))
    weight = training["blocks.1.mlp.down_proj.weight"].numpy()
    scale = torch.from_numpy(np.abs(weight).max(axis=1) / 31).to(torch.bfloat16).float().numpy()
    codes = np.clip(np.round(weight / scale[:, None]), -31, 31)
    assert np.array_equal(stored["blocks.1.mlp.down_proj.weight"].numpy(), codes)
    assert not np.array_equal(codes * scale[:, None], weight)  # the training state is not the rounded copy
    norm = "blocks.1.post_attention_layernorm.weight"  # 1-D: stored in bfloat16, not quantized
    assert stored[norm].dtype == torch.bfloat16 and torch.equal(stored[norm], training[norm].to(torch.bfloat16))
    assert not torch.equal(stored[norm].float(), training[norm])  # training moved it off bfloat16's grid
