"""FoX authors' package checkpoints (issue 34): their FoX (LLaMA) and FoX (Pro) configurations and every
other option of their ForgettingAttentionLayer, saved as their save_pretrained saves them, load through
repo_lens.load, run their forward (fp32 logits within 1e-4 relative of an independent float64 reference)
and trace FoX's cumulative log forget gates."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.errors import CheckpointError

from .fox_layout import CASES, write_fox_checkpoint
from .reference_fox import fox_forward

IDS = [3, 17, 5, 60, 1, 2, 90, 44, 8, 8, 21, 33, 70, 9, 0, 12]


def _load(directory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer files in these tiny checkpoints
        return repo_lens.load(directory, device="cpu")


def _relative(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float((ours.double() - reference).abs().max() / reference.abs().max())


@pytest.mark.parametrize("name", list(CASES))
def test_every_option_loads_runs_their_forward_and_traces(tmp_path, name):
    cfg, weights = write_fox_checkpoint(tmp_path / name, name, seed=len(name))
    lens = _load(tmp_path / name)
    reference, positions = fox_forward(weights, cfg, IDS)
    one, _ = fox_forward(weights, cfg, IDS[:1])
    with torch.no_grad():
        assert _relative(lens.model(torch.tensor([IDS]))[0], reference) < 1e-4
        assert _relative(lens.model(torch.tensor([IDS[:1]]))[0], one) < 1e-4
    trace = lens.trace(IDS, progress=False)
    assert trace.layer_kinds == ["rope" if name == "transformer-rope" else "fox"] * 2
    if name != "transformer-rope":
        np.testing.assert_allclose(trace.positions, torch.stack(positions).numpy(), rtol=1e-5, atol=1e-5)
    assert trace.meta["authors"]["code"] == "github zhixuan-lin/forgetting-transformer" and json.dumps(trace.meta)


def test_decoding_with_the_kv_cache_equals_the_full_forward(tmp_path):
    write_fox_checkpoint(tmp_path, "pro", seed=1)
    model = _load(tmp_path).model
    ids = torch.tensor([IDS])
    with torch.no_grad():
        full, cache = model(ids), model.new_cache()
        pieces = [model(ids[:, :6], cache=cache), model(ids[:, 6:7], cache=cache), model(ids[:, 7:], cache=cache)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change,message", [
    ({"num_kv_heads": 2}, "GQA has not been tested"),
    ({"use_output_norm": True, "use_output_gate": True, "ogate_act": "silu"}, "asserts ogate_act == 'sigmoid'"),
    ({"fgate_type": "sometimes"}, "unknown FoX fgate_type 'sometimes'"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
])
def test_configs_their_code_refuses_are_refused(tmp_path, change, message):
    write_fox_checkpoint(tmp_path, "llama")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=message):
        _load(tmp_path)


def test_a_missing_forget_gate_is_refused(tmp_path):
    _, weights = write_fox_checkpoint(tmp_path, "llama")
    from safetensors.torch import save_file

    del weights["model.layers.1.attn.fgate_proj.bias"]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing weights.*blocks\.1\.attn\.mechanism\.fgate_proj\.bias"):
        _load(tmp_path)
