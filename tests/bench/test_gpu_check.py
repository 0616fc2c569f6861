"""bench/gpu_check.py (issue 18) on the CPU at a small width: its checkpoint is the published layout
(repo_lens' forward equals the independent reference), and every step runs and reports."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import repo_lens
from reference_repo import reference_forward

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("gpu_check", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_the_checkpoint_is_the_published_layout_at_the_published_1b_shape(tmp_path):
    gpu_check = _bench_module()
    shapes = gpu_check.olmo2_weight_shapes(gpu_check.PUBLISHED_1B)
    parameters = sum(torch.Size(shape).numel() for shape in shapes.values())
    assert 1.4e9 < parameters < 1.6e9  # OLMo-2 1B untied (1.48e9) + RePo's maps in layers 5..15
    from big_memory import ARCHS  # its parameter count is a formula, not the key list

    assert parameters == ARCHS[0].params()
    assert shapes["model.layers.5.self_attn.gate_map.weight"] == (256, 2048)  # d_p = d / 8
    assert shapes["model.layers.15.self_attn.final_map.weight"] == (16, 256)
    assert "model.layers.4.self_attn.gate_map.weight" not in shapes

    path = gpu_check.write_checkpoint(tmp_path / "small", gpu_check.SMALL, gpu_check.SMALL_CONTEXT)
    config = json.loads((path / "config.json").read_text())
    lens = repo_lens.load(path, device="cpu", dtype="float32")
    assert lens.model.cfg.layer_mechanisms == ["rope"] * 5 + ["repo"] * 11
    ids = list(range(2, 42))
    expected_logits, expected_positions = reference_forward(
        {name: tensor.float() for name, tensor in load_file(str(path / "model.safetensors")).items()}, config, ids)
    trace = lens.trace(ids, progress=False)
    scale = float(expected_positions.abs().max())
    torch.testing.assert_close(torch.as_tensor(trace.positions).double(), expected_positions,
                               atol=1e-4 * scale, rtol=0)
    with torch.no_grad():
        logits = lens.model(torch.tensor([ids]))[0].double()
    torch.testing.assert_close(logits, expected_logits, atol=1e-3 * float(expected_logits.abs().max()), rtol=0)


@pytest.mark.slow
def test_every_step_runs_and_reports(tmp_path):
    gpu_check = _bench_module()
    assert gpu_check.main(["--small", "--lengths", "64", "600", "--repeats", "1", "--batch", "2", "--threads", "1",
                           "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["device"], results["dtype"]) == ("cpu", "float32")  # device="auto" without CUDA
    measured = [(row["what"], row["tokens"]) for row in results["performance"]]
    assert measured == [("forward", 64), ("trace", 64), ("forward", 600), ("trace", 600),
                        ("attention_mass (16 query rows)", 600), ("forward, batch 2", 1024),
                        ("trace, batch 2", 1024), ("run_with_cache (hook_pos, resid_post)", 512)]
    assert all(row["seconds"] > 0 and row["tokens_per_s"] > 0 for row in results["performance"])
    kv = results["kv_cache"]
    assert kv["max_position_difference"] <= 1e-4 * kv["position_scale"]
    assert "| trace, batch 2 | 1,024 |" in (tmp_path / "table.md").read_text()
