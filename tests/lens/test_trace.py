"""Lens.trace and the Trace file format."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import repo_lens
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.loaders import save_checkpoint
from repo_lens.model.tiny import tiny_model

TEXT = "the cat sat on the mat . hello world"


@pytest.fixture(scope="module")
def lens(repo_dir):
    return repo_lens.load(repo_dir, device="cpu")


def test_trace_of_text_follows_the_contract(lens):
    trace = lens.trace(TEXT)
    n_tokens = len(lens.tokenizer(TEXT)["input_ids"])
    assert trace.positions.shape == (4, 4, n_tokens) and trace.positions.dtype == np.float32
    assert trace.token_ids.dtype == np.int64 and trace.token_ids[0] == lens.tokenizer.bos_token_id
    assert trace.tokens[1:4] == ["the", "cat", "sat"]
    assert trace.layer_kinds == ["rope", "rope", "repo", "repo"]
    np.testing.assert_array_equal(trace.positions[:2], np.broadcast_to(np.arange(n_tokens), (2, 4, n_tokens)))
    assert trace.meta["mechanism"]["d_position"] == 8 and trace.meta["truncation"] is None


def test_ids_and_lists_of_texts(lens):
    single = lens.trace(TEXT)
    for ids in (single.token_ids.tolist(), single.token_ids, torch.from_numpy(single.token_ids)[None]):
        np.testing.assert_array_equal(lens.trace(ids).positions, single.positions)
    batch = lens.trace([TEXT, "hello world"], progress=False)
    assert isinstance(batch, list) and len(batch) == 2
    np.testing.assert_array_equal(batch[0].positions, single.positions)


def test_positions_match_a_run_with_cache(lens):
    trace = lens.trace(TEXT)
    _, cache = lens.model.run_with_cache(torch.from_numpy(trace.token_ids)[None])
    for layer in range(4):
        np.testing.assert_array_equal(trace.positions[layer], cache[f"blocks.{layer}.attn.hook_pos"][0].numpy())


def test_nope_layers_are_constant_and_byte_models_trace():
    model = tiny_model("nope")
    lens = repo_lens.Lens(model, ByteTokenizer())
    trace = lens.trace("héllo\n")
    assert trace.tokens == ["h", "é", "·", "l", "l", "o", "↵"]
    assert np.all(trace.positions[2:] == 0.0)


def test_save_load_roundtrip_is_exact_and_atomic(lens, tmp_path):
    trace = lens.trace(TEXT)
    trace.spans = {"needle": (1, 3)}
    trace.extras = {"deltas": np.ones((4, 4, len(trace)), dtype=np.float32)}
    path = trace.save(tmp_path / "t.safetensors")
    loaded = repo_lens.Trace.load(path)
    np.testing.assert_array_equal(loaded.positions, trace.positions)
    np.testing.assert_array_equal(loaded.token_ids, trace.token_ids)
    np.testing.assert_array_equal(loaded.extras["deltas"], trace.extras["deltas"])
    assert loaded.tokens == trace.tokens and loaded.layer_kinds == trace.layer_kinds
    assert loaded.spans == {"needle": (1, 3)} and loaded.meta["name"] == trace.meta["name"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]  # no temp file left behind


def test_native_checkpoint_roundtrip(tmp_path):
    model = tiny_model("repo", seed=4)
    save_checkpoint(model, tmp_path / "ckpt", info={"name": "tiny"})
    lens = repo_lens.load(tmp_path / "ckpt", device="cpu")
    ids = torch.tensor([[104, 105, 32, 116]])
    with torch.no_grad():
        assert torch.equal(lens.model(ids), model(ids))
    assert isinstance(lens.tokenizer, ByteTokenizer) and lens.meta["name"] == "tiny"


def test_cli_trace_prints_a_layer_table(repo_dir, tmp_path, capsys):
    from repo_lens.cli import main

    assert main(["trace", "--model", str(repo_dir), "--text", TEXT, "--device", "cpu",
                 "--save", str(tmp_path / "t.safetensors")]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [row[1] for row in rows] == ["rope", "rope", "repo", "repo"]
    n_tokens = len(repo_lens.Trace.load(tmp_path / "t.safetensors"))
    assert float(rows[0][3]) == n_tokens - 1  # RoPE layer: max position = T - 1


def test_cli_trace_without_save_runs_after_nnsight_is_imported(repo_dir, tmp_path, capsys):
    """nnsight mounts a ``.save`` method on every object; the command must not take it for ``--save``."""
    import nnsight  # noqa: F401

    from repo_lens.cli import main

    assert hasattr(object(), "save")  # the mount this test guards against
    assert main(["trace", "--model", str(repo_dir), "--text", TEXT, "--device", "cpu"]) == 0
    assert "trace saved" not in capsys.readouterr().out
