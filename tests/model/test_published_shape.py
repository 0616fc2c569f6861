"""Issue 15, item 1: a random checkpoint of SakanaAI/RePo-OLMo2-1B-stage2-L5's shape for tests and benches."""

from __future__ import annotations

import json

import numpy as np
import pytest

import repo_lens
from repo_lens.cli import main
from repo_lens.model.registry import is_learned

# the published model's config.json: num_hidden_layers 16, num_attention_heads 16,
# pe_config.dynmaic_pe_start_layer 5 (RePo in layers 5..15), max_position_embeddings 8192
PUBLISHED_LAYERS, PUBLISHED_HEADS, PUBLISHED_FIRST_REPO_LAYER, PUBLISHED_CONTEXT = 16, 16, 5, 8192


def test_checkpoint_has_the_published_shape(published_shape_dir):
    lens = repo_lens.load(published_shape_dir, device="cpu")
    assert (lens.n_layers, lens.n_heads, lens.context_length) == (PUBLISHED_LAYERS, PUBLISHED_HEADS, PUBLISHED_CONTEXT)
    learned = [is_learned(kind) for kind in lens.model.cfg.layer_mechanisms]
    assert learned == [False] * PUBLISHED_FIRST_REPO_LAYER + [True] * (PUBLISHED_LAYERS - PUBLISHED_FIRST_REPO_LAYER)
    assert len(set(lens.model.cfg.layer_mechanisms[PUBLISHED_FIRST_REPO_LAYER:])) == 1
    assert lens.vocab_size == 257  # byte tokenizer: 256 bytes + the separator


def test_trace_of_4096_tokens(published_shape_trace):
    trace = published_shape_trace
    assert trace.positions.shape == (PUBLISHED_LAYERS, PUBLISHED_HEADS, 4096)
    assert np.isfinite(trace.positions).all()
    # RoPE layers rotate by the index; the first RePo layer's positions are learned, not the index
    np.testing.assert_array_equal(trace.positions[PUBLISHED_FIRST_REPO_LAYER - 1, 3], np.arange(4096))
    assert not np.allclose(trace.positions[PUBLISHED_FIRST_REPO_LAYER, 3], np.arange(4096))


def test_cli_writes_the_same_shape(tmp_path, published_shape_dir):
    assert main(["tiny", str(tmp_path / "ckpt"), "--shape", "olmo2-1b"]) == 0
    written = json.loads((tmp_path / "ckpt" / "config.json").read_text())["model"]
    fixture = json.loads((published_shape_dir / "config.json").read_text())["model"]
    assert written == fixture
    assert (written["n_layers"], written["n_heads"], written["max_position_embeddings"]) == (16, 16, 8192)


@pytest.mark.parametrize("argv, message", [
    (["--shape", "olmo9-70b"], "unknown model shape 'olmo9-70b'; known shapes: olmo2-1b"),
    (["--shape", "olmo2-1b", "--layers", "8"], "--layers 8 conflicts with --shape olmo2-1b"),
])
def test_cli_bad_shape_is_one_error_line(tmp_path, capsys, argv, message):
    assert main(["tiny", str(tmp_path / "ckpt"), *argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("repo-lens: error: ") and message in lines[0], lines
    assert not (tmp_path / "ckpt").exists()
